"""A PNG reader for screenshots, on the standard library only (zlib and struct).

It reads what a browser's screenshot is: 8-bit RGB or RGBA, not interlaced, any of PNG's
five row filters; every chunk's CRC is checked. Anything else raises ``ValueError``: a test
must not pass over a picture it could not read.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

SIGNATURE = b"\x89PNG\r\n\x1a\n"
RGB, RGBA = 2, 6
"""PNG colour types (bytes per pixel 3 and 4)."""

Colour = tuple[int, int, int]


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    channels: int  # 3 (RGB) or 4 (RGBA)
    rows: list[bytes]  # unfiltered, ``width * channels`` bytes each

    def pixel(self, x: int, y: int) -> Colour:
        """The colour at (x, y), alpha left out."""
        at = x * self.channels
        r, g, b = self.rows[y][at:at + 3]
        return r, g, b

    def colours(self, left: int = 0, top: int = 0, right: int | None = None,
                bottom: int | None = None) -> set[Colour]:
        """The distinct colours of the box [left, right) x [top, bottom), clipped to the
        picture."""
        right = min(self.width, self.width if right is None else right)
        bottom = min(self.height, self.height if bottom is None else bottom)
        found: set[Colour] = set()
        c = self.channels
        for y in range(max(top, 0), bottom):
            row = self.rows[y]
            found.update(zip(row[max(left, 0) * c:right * c:c],
                             row[max(left, 0) * c + 1:right * c:c],
                             row[max(left, 0) * c + 2:right * c:c], strict=True))
        return found


def _chunks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    at = len(SIGNATURE)
    while at < len(data):
        length, kind = struct.unpack_from(">I4s", data, at)
        body = data[at + 8:at + 8 + length]
        (crc,) = struct.unpack_from(">I", data, at + 8 + length)
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"bad CRC in chunk {kind!r}")
        yield kind, body
        at += 12 + length


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(kind: int, line: bytes, prev: bytes, bpp: int) -> bytes:
    """Undo one row's filter (PNG's None, Sub, Up, Average, Paeth)."""
    if kind == 0:
        return line
    if kind == 1:  # Sub: each channel is a running sum along the row
        out = bytearray(len(line))
        for channel in range(bpp):
            out[channel::bpp] = bytes(accumulate(line[channel::bpp],
                                                 lambda left, x: (left + x) & 255))
        return bytes(out)
    if kind == 2:
        return bytes((x + up) & 255 for x, up in zip(line, prev, strict=True))
    out = bytearray(line)
    for i in range(len(out)):
        left = out[i - bpp] if i >= bpp else 0
        if kind == 3:
            out[i] = (out[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            out[i] = (out[i] + _paeth(left, prev[i], prev[i - bpp] if i >= bpp else 0)) & 255
        else:
            raise ValueError(f"unknown PNG filter {kind}")
    return bytes(out)


def read_png(data: bytes) -> Picture:
    header = None
    compressed = []
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (RGB, RGBA) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour_type}, "
                         f"interlace {interlace}")
    bpp = 3 if colour_type == RGB else 4
    raw = zlib.decompress(b"".join(compressed))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        raise ValueError("image data does not match the header's size")
    rows: list[bytes] = []
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        prev = _unfilter(raw[start], raw[start + 1:start + 1 + stride], prev, bpp)
        rows.append(prev)
    return Picture(width, height, bpp, rows)
