"""Checks a safetensors file written by venom with nothing but struct and
json, the way another tool would read it: the header length, the JSON
header, every tensor's dtype, shape and data_offsets (inside the data,
matching the shape's byte size, tiling the data with no gap, overlap or
trailing bytes). Prints "name dtype shape v1 v2 ..." per tensor (sorted by
name; floats as %.9g, integers in full) and "meta key value" per metadata entry, for the
Lua test to compare; exits 1 with a message at the first violation."""
import json
import struct
import sys

SIZES = {"F32": (4, "f"), "I32": (4, "i"), "I64": (8, "q"), "U8": (1, "B")}


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


with open(sys.argv[1], "rb") as f:
    raw = f.read()
(n,) = struct.unpack("<Q", raw[:8])
if n % 8 != 0 or 8 + n > len(raw):
    fail("header length %d (file %d bytes)" % (n, len(raw)))
header = json.loads(raw[8 : 8 + n].decode("utf-8"))
data = raw[8 + n :]
meta = header.pop("__metadata__", {})
spans, lines = [], []
for name, info in header.items():
    if set(info) != {"dtype", "shape", "data_offsets"}:
        fail("%s: keys %s" % (name, sorted(info)))
    size, code = SIZES[info["dtype"]]
    begin, end = info["data_offsets"]
    count = 1
    for d in info["shape"]:
        count *= d
    if not 0 <= begin <= end <= len(data) or end - begin != count * size:
        fail("%s: offsets [%d, %d], shape %s, data %d bytes" % (name, begin, end, info["shape"], len(data)))
    spans.append((begin, end, name))
    values = struct.unpack("<%d%s" % (count, code), data[begin:end])
    shape = "x".join(str(d) for d in info["shape"])
    text = ["%.9g" % v if code == "f" else "%d" % v for v in values]
    lines.append(" ".join([name, info["dtype"], shape] + text))
pos = 0
for begin, end, name in sorted(spans):
    if begin != pos:
        fail("%s starts at %d, the previous tensor ends at %d" % (name, begin, pos))
    pos = end
if pos != len(data):
    fail("the tensors end at %d of %d data bytes" % (pos, len(data)))
for line in sorted(lines):
    print(line)
for key in sorted(meta):
    print("meta %s %s" % (key, meta[key]))
