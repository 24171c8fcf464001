"""Image decoding pipelines ("backends"): an image's encoded bytes go in, one CHW tensor comes out.

The dataset (:class:`imagenet.data.ImageFiles`) reads the bytes, from a file or a shard; a backend
is called as ``transform(data, name)``, the name only for messages.

Two backends live here and are registered in :data:`imagenet.data.BACKENDS`:

``baseline``
    pytorch/examples' pipeline, unchanged: ImageFolder's PIL loader, RandomResizedCrop(size) +
    RandomHorizontalFlip + ToTensor + Normalize for training, Resize + CenterCrop + ToTensor +
    Normalize for validation; float output. It is the reference every speed-up is measured against.

``fast``
    The same augmentation, decoding only what the crop needs:

    1. The RandomResizedCrop box and the flip are drawn before decoding, from the size in the JPEG
       header, with torchvision's rule and distribution (one torch.rand call instead of eight
       scalar ones; a test compares the distributions).
    2. Only the box is decoded, where our C extension is built (``imagenet/_jpeg_region.c``, which
       says why it exists): libjpeg-turbo stops after the box's last row, and skips colour
       conversion, upsampling and inverse DCT above and beside it. The rows above must still be
       entropy decoded (most of a ~110 KB ImageNet photo's decode time), so this saves much less
       than the box's share of the area (the per-core records are in RESULTS.md "Data at scale").
    3. Without the extension (or for what it cannot decode: CMYK, corrupt data), rows below the
       box are never decoded: the frame height in the JPEG header (SOF) is lowered to the box's
       last row plus one MCU row, so libjpeg stops there and skips the rest of the entropy-coded
       data, and ``simplejpeg`` (libjpeg-turbo without PIL's chunked feeding and RGBX unpacking)
       decodes, where installed; PIL decodes where it is missing or rejects the bytes. All give
       the same pixels (CMYK converted to RGB within 1 level of PIL's); the per-core records are in
       RESULTS.md "Data at scale".
    4. When the box is at least 2, 4 or 8 times the output size, libjpeg's DCT scaling (PIL
       ``draft``) decodes it at that reduction instead (common for big photos or small training
       sizes).
    5. Crop, antialiased bilinear resize and flip run on uint8 (torch's vectorised uint8 kernel,
       several times faster than PIL's resize), and the output stays uint8: a quarter of the bytes
       through worker pipes; :class:`imagenet.data.DeviceNormalizer` normalises on the device.

    Validation decodes in full (no DCT scaling) and resizes + centre-crops on uint8.
    Outputs differ from the baseline's only by resampling error on the same box (tests check it).

``python -m results.bench pipeline`` measures them per core (results/runners/pipeline_bench.py).
"""
from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms.v2 import functional as TF

try:  # libjpeg-turbo called directly: the same pixels as PIL's decode, with less overhead
    import simplejpeg
except ImportError:  # PIL decodes instead
    simplejpeg = None

try:  # our C extension (imagenet/_jpeg_region.c, built by `pip install -e .` where libjpeg-dev exists)
    from imagenet import _jpeg_region
except ImportError:  # whole rows are decoded instead
    _jpeg_region = None

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_SCALE = (0.08, 1.0)  # RandomResizedCrop's defaults, spelled out because both backends must agree
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)
DCT_REDUCTIONS = (8, 4, 2)  # the power-of-two scalings PIL's draft() can ask libjpeg for

Transform = Callable[[bytes, str], torch.Tensor]  # (encoded image, its name for messages) -> CHW image


def pil_rgb(data: bytes) -> Image.Image:
    """Decoded RGB image, as torchvision ImageFolder's PIL loader gives it (convert forces the decode)."""
    return Image.open(io.BytesIO(data)).convert("RGB")


def val_resize(image_size: int) -> int:
    """The short side validation resizes to before the centre crop (256 for 224, as ImageNet)."""
    return int(round(image_size * 256 / 224))


# ---------------------------------------------------------------- baseline

def baseline_backend(train: bool, image_size: int) -> Transform:
    """pytorch/examples imagenet/main.py's transforms on ImageFolder's loader; float output."""
    normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        ops = T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
    else:
        ops = T.Compose([T.Resize(val_resize(image_size)), T.CenterCrop(image_size), T.ToTensor(), normalize])
    return _Composed(ops)


class _Composed:
    """bytes -> ops(ImageFolder's PIL RGB image); a class rather than a lambda so spawned workers can
    pickle it."""

    def __init__(self, ops: Callable):
        self.ops = ops

    def __call__(self, data: bytes, name: str = "") -> torch.Tensor:
        return self.ops(pil_rgb(data))


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


# ---------------------------------------------------------------- fast decoding

def dct_reduction(crop_h: int, crop_w: int, out_h: int, out_w: int) -> int:
    """Largest DCT scaling that still leaves the crop at least the output size (no upsampling)."""
    for r in DCT_REDUCTIONS:
        if crop_h >= r * out_h and crop_w >= r * out_w:
            return r
    return 1


def _open(buf: bytes, reduction: int) -> Tuple[Image.Image, int]:
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


def _rgb(im: Image.Image) -> Image.Image:
    return im if im.mode == "RGB" else im.convert("RGB")


def _hwc(im: Image.Image) -> torch.Tensor:
    """uint8 HWC pixels of an RGB image: one copy into a bytearray, cheaper than numpy's array
    interface, and writable, so torch does not warn."""
    return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(im.height, im.width, 3)


def _as_tensor(im: Image.Image) -> torch.Tensor:
    """uint8 CHW view of an RGB image's HWC pixels (channels-last strides: no repacking)."""
    return _hwc(im).permute(2, 0, 1)


def scaled_box(box: Tuple[int, int, int, int], scale: int, height: int, width: int) -> Tuple[int, int, int, int]:
    """(top, left, h, w) in full-size pixels -> the nearest whole-pixel box in the HEIGHT x WIDTH
    image a 1/SCALE decode gives. Each edge moves by at most SCALE/2 full-size pixels, which only
    happens for crops at least SCALE times the output size: a jitter under 1/(2 x output size)."""
    if scale == 1:
        return box
    top, left, h, w = box
    y0, x0 = min(round(top / scale), height - 1), min(round(left / scale), width - 1)
    y1 = min(max(round((top + h) / scale), y0 + 1), height)
    x1 = min(max(round((left + w) / scale), x0 + 1), width)
    return y0, x0, y1 - y0, x1 - x0


def crop_box(height: int, width: int, uniforms: Sequence[float], scale: Tuple[float, float] = CROP_SCALE,
             ratio: Tuple[float, float] = CROP_RATIO) -> Tuple[int, int, int, int]:
    """RandomResizedCrop's box (top, left, h, w) for a HEIGHT x WIDTH image, from 4 uniforms per try.

    The Inception-style rule torchvision implements: up to ten tries of an area fraction uniform in
    SCALE and a log-uniform aspect ratio in RATIO; the first box that fits is placed uniformly;
    if none fits, the centred largest box with a clamped aspect ratio. Drawing the uniforms in one
    torch call instead of eight scalar ones saves ~0.1 ms per image; tests check the distribution
    matches torchvision's get_params.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for k in range(0, min(len(uniforms), 40) - 3, 4):
        a, b, c, d = uniforms[k:k + 4]
        target = area * (scale[0] + (scale[1] - scale[0]) * a)
        aspect = math.exp(log_lo + (log_hi - log_lo) * b)
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = min(int(c * (height - h + 1)), height - h)
            left = min(int(d * (width - w + 1)), width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        w, h = int(round(height * ratio[1])), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class FastTrain:
    """RandomResizedCrop + horizontal flip, decoding only the rows (and DCT scale) the crop needs."""

    def __init__(self, image_size: int):
        self.size = image_size

    @staticmethod
    def sample(height: int, width: int) -> Tuple[Tuple[int, int, int, int], bool]:
        """A crop box and a flip, from torch's CPU random stream (seeded per sample in seeded runs:
        imagenet.data.ImageFiles)."""
        u = torch.rand(41).tolist()
        return crop_box(height, width, u[:40]), u[40] < 0.5

    def __call__(self, buf: bytes, name: str = "") -> torch.Tensor:
        frame = jpeg_frame(buf)
        if frame is None:  # not a JPEG (or an odd one): decode fully, augment the same way
            im = _rgb(Image.open(io.BytesIO(buf)))
            return self.render_decoded(im, *self.sample(im.height, im.width))
        return self.render(buf, frame, *self.sample(frame.height, frame.width))

    def render(self, buf: bytes, frame: JpegFrame, box: Tuple[int, int, int, int], flip: bool) -> torch.Tensor:
        """The output for a given box and flip: the box alone (region decoder), else the rows down to
        the box (simplejpeg, else PIL at the DCT scale the box allows)."""
        top, left, h, w = box
        reduction = dct_reduction(h, w, self.size, self.size)
        hwc = decode_box(buf, box) if reduction == 1 else None
        if hwc is not None:
            return self._finish(hwc, flip)
        rows = with_rows(buf, frame, frame.rows_for(top + h, reduction))
        hwc = decode_hwc(rows) if reduction == 1 else None
        if hwc is not None:
            return self._finish(hwc[top:top + h, left:left + w], flip)
        im, scale = _open(rows, reduction)
        y, x, ch, cw = scaled_box(box, scale, im.height, im.width)
        return self._finish(_hwc(_rgb(im.crop((x, y, x + cw, y + ch)))), flip)

    def render_decoded(self, im: Image.Image, box: Tuple[int, int, int, int], flip: bool) -> torch.Tensor:
        top, left, h, w = box
        return self._finish(_hwc(im.crop((left, top, left + w, top + h))), flip)

    def _finish(self, crop: torch.Tensor, flip: bool) -> torch.Tensor:
        """An HWC uint8 crop resized to a CHW output, then flipped: the filter is symmetric, so this
        equals flipping first, and the output is usually the smaller image to flip. The crop is made
        contiguous first: the channels-last layout the resize's vectorised kernel needs."""
        out = resize_uint8(crop.contiguous().permute(2, 0, 1), self.size, self.size)
        return out.flip(2) if flip else out


def resize_uint8(chw: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Antialiased bilinear resize of a uint8 CHW image (torch's vectorised uint8 path for
    channels-last input; the same filter as PIL's and torchvision's) to a contiguous CHW tensor."""
    out = torch.nn.functional.interpolate(chw.unsqueeze(0), size=(height, width), mode="bilinear",
                                          align_corners=False, antialias=True)
    return out[0].contiguous()


class FastVal:
    """Resize(size*256/224) + CenterCrop(size) on uint8 tensors.

    Validation decodes in full, without DCT scaling: it is ~4 % of the images an epoch reads, and
    its accuracy is compared with published numbers, so it stays within rounding of the baseline.
    """

    def __init__(self, image_size: int):
        self.size = image_size
        self.resize = val_resize(image_size)

    def __call__(self, buf: bytes, name: str = "") -> torch.Tensor:
        hwc = decode_hwc(buf)  # None for what is not a JPEG, too: simplejpeg rejects it
        chw = hwc.permute(2, 0, 1) if hwc is not None else _as_tensor(_rgb(Image.open(io.BytesIO(buf))))
        out = resize_uint8(chw, *resized_hw(chw.shape[1], chw.shape[2], self.resize))
        return TF.center_crop(out, [self.size, self.size]).contiguous()


def resized_hw(height: int, width: int, short: int) -> List[int]:
    """torchvision's Resize(short) output size for a HEIGHT x WIDTH image."""
    if height <= width:
        return [short, int(short * width / height)]
    return [int(short * height / width), short]


def _shape_only(height: int, width: int) -> torch.Tensor:
    """A tensor with an image's shape and no pixels: what get_params needs to draw a box."""
    return torch.empty((0, height, width), dtype=torch.uint8)


def fast_backend(train: bool, image_size: int) -> Transform:
    """Decode only what is needed; uint8 CHW output."""
    return FastTrain(image_size) if train else FastVal(image_size)


BACKENDS: Dict[str, Callable[[bool, int], Transform]] = {"baseline": baseline_backend, "fast": fast_backend}
