"""JPEG bytes -> pixels, decoding as little as possible: the frame header, row-prefix and region
decoding, DCT scaling.

Three decoders, fastest first (the ``fast`` backend picks; all give PIL's pixels):

- our C extension (``_jpeg_region.c`` beside this file, which says why it exists) decodes a box
  alone with libjpeg-turbo's region decoding;
- ``simplejpeg`` (libjpeg-turbo without PIL's chunked feeding and RGBX unpacking) decodes rows,
  where installed; :func:`with_rows` lowers the frame height in the header (SOF) so it stops below
  the box;
- PIL, at the DCT scaling (``draft``) the box allows.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from PIL import Image

try:  # libjpeg-turbo called directly: the same pixels as PIL's decode, with less overhead
    import simplejpeg
except ImportError:  # PIL decodes instead
    simplejpeg = None

try:  # our C extension (_jpeg_region.c, built by `pip install -e .` where libjpeg-dev exists)
    from hpc_imagenet.imagenet.data.decode import _jpeg_region
except ImportError:  # whole rows are decoded instead
    _jpeg_region = None

DCT_REDUCTIONS = (8, 4, 2)  # the power-of-two scalings PIL's draft() can ask libjpeg for


# ---------------------------------------------------------------- JPEG header

# Start-of-frame markers; C4 (DHT), C8 (reserved) and CC (DAC) share the range but are not frames.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Huffman-coded frames (baseline, extended, progressive): their scans list blocks top to bottom,
# so a frame declared shorter decodes the same top rows. Arithmetic-coded and lossless are rare
# enough to simply decode in full.
_ROW_PREFIX_SOF = frozenset({0xC0, 0xC1, 0xC2})
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # markers without a length field


@dataclass(frozen=True)
class JpegFrame:
    """What the SOF segment says: size, where the height is stored, rows per MCU row."""

    height: int
    width: int
    height_offset: int  # byte offset of the 16-bit frame height in the file
    mcu_rows: int       # image rows covered by one MCU row (8 x the largest vertical sampling)
    row_prefix: bool    # whether lowering the height yields the same top rows

    def rows_for(self, bottom: int, scale: int = 1) -> int:
        """Frame height that decodes rows [0, bottom) exactly at 1/SCALE: whole MCU rows, at least
        one output row past the bottom, because chroma upsampling replicates the frame's last row."""
        return min(self.height, -(-(bottom + scale) // self.mcu_rows) * self.mcu_rows)


def jpeg_frame(buf: bytes) -> Optional[JpegFrame]:
    """Parse the markers up to the first SOF; None for anything that is not a usable JPEG."""
    if buf[:2] != b"\xff\xd8":
        return None
    pos, end = 2, len(buf)
    while pos + 4 <= end:
        if buf[pos] != 0xFF:
            return None
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # EOI or a scan before any frame header
            return None
        length = (buf[pos + 2] << 8) | buf[pos + 3]
        if marker in _SOF_MARKERS:
            return _frame(buf, pos, marker)
        pos += 2 + length
    return None


def _frame(buf: bytes, pos: int, marker: int) -> Optional[JpegFrame]:
    if pos + 10 > len(buf):
        return None
    height = (buf[pos + 5] << 8) | buf[pos + 6]
    width = (buf[pos + 7] << 8) | buf[pos + 8]
    components = buf[pos + 9]
    sampling = buf[pos + 11:pos + 10 + 3 * components:3]
    if height == 0 or width == 0 or len(sampling) != components or components == 0:
        return None  # height 0 is defined later by a DNL marker; leave such files to PIL
    v_max = max(s & 0x0F for s in sampling) or 1
    return JpegFrame(height, width, pos + 5, 8 * v_max, marker in _ROW_PREFIX_SOF)


def with_rows(buf: bytes, frame: JpegFrame, rows: int) -> bytes:
    """A copy of BUF whose frame declares ROWS rows: decoding stops there (the remaining scan data
    is skipped as padding before the EOI marker)."""
    if rows >= frame.height or not frame.row_prefix:
        return buf
    patched = bytearray(buf)
    patched[frame.height_offset:frame.height_offset + 2] = rows.to_bytes(2, "big")
    return bytes(patched)




def dct_reduction(crop_h: int, crop_w: int, out_h: int, out_w: int) -> int:
    """Largest DCT scaling that still leaves the crop at least the output size (no upsampling)."""
    for r in DCT_REDUCTIONS:
        if crop_h >= r * out_h and crop_w >= r * out_w:
            return r
    return 1


def open_reduced(buf: bytes, reduction: int) -> Tuple[Image.Image, int]:
    """Open a JPEG (lazily) with DCT scaling asked for; returns it and the scaling libjpeg will use."""
    im = Image.open(io.BytesIO(buf), formats=("JPEG",))  # no probing of other formats' headers
    if reduction == 1:
        return im, 1
    width = im.width
    mode = im.mode if im.mode in ("RGB", "L", "CMYK") else "RGB"
    im.draft(mode, (im.width // reduction, im.height // reduction))
    return im, 1 << round(math.log2(width / im.width))  # draft rounds the size up: ceil(w / s)


def decode_hwc(buf: bytes) -> Optional[torch.Tensor]:
    """uint8 HWC RGB pixels of a JPEG decoded by simplejpeg; None where PIL must decode it instead."""
    if simplejpeg is None:
        return None
    try:  # not strict: a frame shortened by with_rows leaves data libjpeg warns about and skips
        return torch.from_numpy(simplejpeg.decode_jpeg(buf, colorspace="RGB", strict=False))
    except ValueError:
        return None


def region_decoder_available() -> bool:
    """Whether the C region decoder (_jpeg_region.c beside this file) was built and loads here."""
    return _jpeg_region is not None


def decode_box(buf: bytes, box: Tuple[int, int, int, int]) -> Optional[torch.Tensor]:
    """uint8 HWC RGB pixels of the box (top, left, h, w) of a JPEG, decoded alone by libjpeg-turbo's
    region decoding; None where the extension is missing or cannot decode the bytes (CMYK, corrupt
    data: the row decoder then handles them as before)."""
    if _jpeg_region is None:
        return None
    top, left, h, w = box
    try:
        pixels = _jpeg_region.decode_region(buf, top, left, h, w)
    except ValueError:
        return None
    return None if pixels is None else torch.frombuffer(pixels, dtype=torch.uint8).view(h, w, 3)

