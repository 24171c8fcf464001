"""The ``fast`` backend: torchvision's training augmentation, decoding only what the crop needs.

A backend is called as ``transform(data, name)`` on an image's encoded bytes (read by
:class:`hpc_imagenet.imagenet.data.loader.ImageFiles` from a file or a shard), the name only for messages.

``fast``
    The same augmentation, decoding only what the crop needs:

    1. The RandomResizedCrop box and the flip are drawn before decoding, from the size in the JPEG
       header, with torchvision's rule and distribution (one torch.rand call instead of eight
       scalar ones; a test compares the distributions).
    2. Only the box is decoded, where our C extension is built (``_jpeg_region.c``, which says why
       it exists; :mod:`.jpeg` calls it): libjpeg-turbo stops after the box's last row, and skips colour
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
       through worker pipes; :class:`hpc_imagenet.imagenet.data.normalize.DeviceNormalizer` normalises on the device.

    6. ``--auto-augment`` and ``--random-erase`` then run on the uint8 output (:mod:`.augment`).

    Validation decodes in full (no DCT scaling) and resizes + centre-crops on uint8.
    Outputs differ from the baseline's only by resampling error on the same box (tests check it).

``python -m hpc_imagenet.harness.bench pipeline`` measures them per core
(hpc_imagenet/harness/runners/pipeline_bench.py).
"""
from __future__ import annotations

import io
import logging
import math
from typing import List, Optional, Sequence, Tuple

import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from hpc_imagenet.imagenet.data.decode.augment import NONE, Augmentation, uint8_ops
from hpc_imagenet.imagenet.data.decode.base import CROP_RATIO, CROP_SCALE, Transform, resample_options, val_resize
from hpc_imagenet.imagenet.data.decode.jpeg import (JpegFrame, decode_box, decode_hwc, dct_reduction, jpeg_frame,
                                                    open_reduced, region_decoder_available, with_rows)

log = logging.getLogger(__name__)


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
    """RandomResizedCrop + horizontal flip, decoding only the rows (and DCT scale) the crop needs; then
    the augmentation policy and random erasing, if any."""

    def __init__(self, image_size: int, crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE):
        self.size, self.crop_scale, self.crop_ratio = image_size, crop_scale, augment.crop_ratio
        self.mode, self.ops = augment.interpolation, uint8_ops(augment)

    @staticmethod
    def sample(height: int, width: int, scale: Tuple[float, float] = CROP_SCALE,
               ratio: Tuple[float, float] = CROP_RATIO) -> Tuple[Tuple[int, int, int, int], bool]:
        """A crop box (its area a fraction in SCALE of the image's, its aspect ratio in RATIO) and a flip,
        from torch's CPU random stream (seeded per sample in seeded runs:
        hpc_imagenet.imagenet.data.loader.ImageFiles)."""
        u = torch.rand(41).tolist()
        return crop_box(height, width, u[:40], scale, ratio), u[40] < 0.5

    def __call__(self, buf: bytes, name: str = "") -> torch.Tensor:
        frame = jpeg_frame(buf)
        if frame is None:  # not a JPEG (or an odd one): decode fully, augment the same way
            im = _rgb(Image.open(io.BytesIO(buf)))
            out = self.render_decoded(im, *self.sample(im.height, im.width, self.crop_scale, self.crop_ratio))
        else:
            out = self.render(buf, frame, *self.sample(frame.height, frame.width, self.crop_scale,
                                                                  self.crop_ratio))
        return self.ops(out) if self.ops is not None else out

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
        im, scale = open_reduced(rows, reduction)
        y, x, ch, cw = scaled_box(box, scale, im.height, im.width)
        return self._finish(_hwc(_rgb(im.crop((x, y, x + cw, y + ch)))), flip)

    def render_decoded(self, im: Image.Image, box: Tuple[int, int, int, int], flip: bool) -> torch.Tensor:
        top, left, h, w = box
        return self._finish(_hwc(im.crop((left, top, left + w, top + h))), flip)

    def _finish(self, crop: torch.Tensor, flip: bool) -> torch.Tensor:
        """An HWC uint8 crop resized to a CHW output, then flipped: the filter is symmetric, so this
        equals flipping first, and the output is usually the smaller image to flip. The crop is made
        contiguous first: the channels-last layout the resize's vectorised kernel needs."""
        out = resize_uint8(crop.contiguous().permute(2, 0, 1), self.size, self.size, self.mode)
        return out.flip(2) if flip else out


def resize_uint8(chw: torch.Tensor, height: int, width: int, mode: str = "bilinear") -> torch.Tensor:
    """Antialiased bilinear (or bicubic; nearest: no filter) resize of a uint8 CHW image (torch's
    vectorised uint8 path for channels-last input; the same filters as PIL's and torchvision's) to a
    contiguous CHW tensor."""
    out = torch.nn.functional.interpolate(chw.unsqueeze(0), size=(height, width), mode=mode, **resample_options(mode))
    return out[0].contiguous()


class FastVal:
    """Resize(resize_size, default size*256/224) + CenterCrop(size) on uint8 tensors.

    Validation decodes in full, without DCT scaling: it is ~4 % of the images an epoch reads, and
    its accuracy is compared with published numbers, so it stays within rounding of the baseline.
    """

    def __init__(self, image_size: int, resize_size: Optional[int] = None, mode: str = "bilinear"):
        self.size, self.mode = image_size, mode
        self.resize = resize_size or val_resize(image_size)

    def __call__(self, buf: bytes, name: str = "") -> torch.Tensor:
        hwc = decode_hwc(buf)  # None for what is not a JPEG, too: simplejpeg rejects it
        chw = hwc.permute(2, 0, 1) if hwc is not None else _as_tensor(_rgb(Image.open(io.BytesIO(buf))))
        out = resize_uint8(chw, *resized_hw(chw.shape[1], chw.shape[2], self.resize), self.mode)
        return TF.center_crop(out, [self.size, self.size]).contiguous()


def resized_hw(height: int, width: int, short: int) -> List[int]:
    """torchvision's Resize(short) output size for a HEIGHT x WIDTH image."""
    if height <= width:
        return [short, int(short * width / height)]
    return [int(short * height / width), short]


def _shape_only(height: int, width: int) -> torch.Tensor:
    """A tensor with an image's shape and no pixels: what get_params needs to draw a box."""
    return torch.empty((0, height, width), dtype=torch.uint8)


_told_no_region_decoder = False


def fast_backend(train: bool, image_size: int, resize_size: Optional[int] = None,
                 crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE) -> Transform:
    """Decode only what is needed; uint8 CHW output (validation uses only AUGMENT's interpolation)."""
    global _told_no_region_decoder
    if not region_decoder_available() and not _told_no_region_decoder:
        _told_no_region_decoder = True  # once per process: the cause is the same for every loader
        log.warning("the fast backend runs without its region decoder "
                    "(hpc_imagenet/imagenet/data/decode/_jpeg_region.c is "
                    "not built: `pip install -e .` with a C compiler and libjpeg-turbo's headers, e.g. "
                    "libjpeg-dev); it decodes the rows down to each crop instead, at a lower rate per core")
    if train:
        return FastTrain(image_size, crop_scale, augment)
    return FastVal(image_size, resize_size, augment.interpolation)

