"""An independent safetensors writer (only struct and json) for the interop
test: writes the tensors below to sys.argv[1], with the header entries in a
different order from the data and the header padded to 8 bytes.

The values are those tests/lua/test_safetensors_interop.lua expects.
write() is shared with write_safetensors_torch.py."""
import json
import struct
import sys

TENSORS = [  # name, dtype, struct code, shape, values
    ("weight", "F32", "f", [2, 3], [1.5, -2.25, 0.0, 3e-5, -1e10, 7.0]),
    ("counts", "I32", "i", [2, 2], [-7, 0, 2**31 - 1, -(2**31)]),
    ("ids", "I64", "q", [4], [-(2**53), -1, 0, 2**40]),
    ("mask", "U8", "B", [5], [0, 1, 128, 254, 255]),
    ("scalar", "F32", "f", [], [0.5]),
    ("nothing", "F32", "f", [0, 4], []),
]


def write(path, tensors, metadata, reverse=False):
    """Writes tensors (a list as TENSORS) and metadata (a dict) to path;
    reverse puts the header entries in the reverse order of the data."""
    header, blobs, pos = {}, [], 0
    for name, dtype, code, shape, values in tensors:
        blob = struct.pack("<%d%s" % (len(values), code), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(blob)]}
        blobs.append(blob)
        pos += len(blob)
    header["__metadata__"] = metadata
    items = list(header.items())
    text = json.dumps(dict(reversed(items) if reverse else items)).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(b"".join(blobs))


if __name__ == "__main__":
    # Reverse the key order: the reader must go by data_offsets, not key order.
    write(sys.argv[1], TENSORS, {"format": "pt", "writer": "python struct+json"}, reverse=True)
