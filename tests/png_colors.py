#!/usr/bin/env python3
"""png_colors.py: counts the coloured pixels (max - min channel > 60: not white, grey or black)
inside rectangles of a PNG screenshot, with a PNG decoder from the specification (zlib, the
five scanline filters; 8-bit RGB or RGBA, not interlaced, as Chromium writes them).

    png_colors.py SHOT.png "x,y,w,h;x,y,w,h;..."

Prints one count per rectangle, space-separated."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    off, idat, hdr = 8, b"", None
    while off < len(data):
        (n,) = struct.unpack(">I", data[off:off + 4])
        kind, body = data[off + 4:off + 8], data[off + 8:off + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        off += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise SystemExit(f"{path}: PNG type {ctype} depth {depth} interlace {interlace} not handled")
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, p = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[p], bytearray(raw[p + 1:p + 1 + stride])
        p += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


w, h, bpp, rows = decode(sys.argv[1])
counts = []
for r in sys.argv[2].split(";"):
    x, y, rw, rh = (int(v) for v in r.split(","))
    n = 0
    for yy in range(max(0, y), min(h, y + rh)):
        line = rows[yy]
        for xx in range(max(0, x), min(w, x + rw)):
            px = line[xx * bpp:xx * bpp + 3]
            if max(px) - min(px) > 60:
                n += 1
    counts.append(n)
print(" ".join(map(str, counts)))
