"""Just enough of a PNG reader to look at a browser's screenshot: size and pixels.

8-bit RGB and RGBA, not interlaced: what headless chromium writes. Standard library only
(zlib, struct), so the screenshot test needs no imaging package.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}
"""PNG colour type -> bytes per pixel at bit depth 8: RGB, RGBA."""


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]
    """Unfiltered scanlines, ``width * channels`` bytes each."""

    def colours(self) -> set[tuple[int, ...]]:
        """Every distinct pixel colour (alpha included for RGBA)."""
        step = self.channels
        return {tuple(row[i:i + step]) for row in self.rows for i in range(0, len(row), step)}


def read_png(path: Path) -> Image:
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path} is not a PNG file")
    width = height = channels = 0
    compressed = bytearray()
    position = len(SIGNATURE)
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind = data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in CHANNELS or interlace:
                raise ValueError(f"{path}: depth {depth}, colour type {colour}, interlace "
                                 f"{interlace}: only 8-bit RGB(A), not interlaced, is read")
            channels = CHANNELS[colour]
        elif kind == b"IDAT":
            compressed += body
    raw = zlib.decompress(bytes(compressed))
    return Image(width, height, channels, _unfilter(raw, width * channels, height, channels))


def _unfilter(raw: bytes, stride: int, height: int, bpp: int) -> list[bytes]:
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous))
        elif kind == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + previous[i]) // 2) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                corner = previous[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, previous[i], corner)) & 0xFF
        previous = bytes(line)
        rows.append(previous)
    return rows


def _paeth(left: int, up: int, corner: int) -> int:
    estimate = left + up - corner
    to_left, to_up, to_corner = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
    if to_left <= to_up and to_left <= to_corner:
        return left
    return up if to_up <= to_corner else corner
