"""Prints "WIDTH HEIGHT COLOURS INK" for a PNG file: its size, the number of
distinct pixel colours, and the fraction of pixels that differ from the most
common colour (the background). An independent decoder (zlib + the PNG
filters from the specification), so the plot test does not trust the writer.

    python3 tests/python/png_stats.py FILE.png
"""
import struct
import sys
import zlib
from collections import Counter


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file (bad signature)")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    if depth != 8 or interlace:
        raise ValueError("only 8-bit, non-interlaced PNGs are handled (depth %d)" % depth)
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            pred = (0, a, b, (a + b) // 2, paeth(a, b, c))[kind]
            line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    pixels = Counter()
    for line in rows:
        for x in range(width):
            pixels[line[x * channels:(x + 1) * channels]] += 1
    return width, height, pixels


def main():
    width, height, pixels = decode(open(sys.argv[1], "rb").read())
    background = pixels.most_common(1)[0][1]
    print(width, height, len(pixels), "%.6f" % (1 - background / (width * height)))


if __name__ == "__main__":
    main()
