"""The ``device`` data backend: JPEG bytes through the loader, decoding on the training device.

Loader workers only read each image's bytes (from a file or a shard) and draw its augmentation (the crop box from the JPEG header,
with the ``fast`` backend's rule and distribution, and the flip); the batch crosses the worker pipe
as compressed bytes (~110 KB an ImageNet photo instead of 150 KB of pixels). The training process
then decodes the whole batch in one ``torchvision.io.decode_jpeg`` call on its device (nvJPEG on a
GPU, libjpeg-turbo on a CPU) and crops, flips and resizes it there. It is for nodes with few CPU
cores per GPU, where CPU decoding cannot keep up; :class:`imagenet.data.DeviceNormalizer` calls
:meth:`EncodedBatch.decode`, so the training loop is unchanged.

Why ``torchvision.ops.roi_align``: every output of a batch is size x size, so one call with a box per
image resamples the whole batch. A Python loop of crop, flip and ``interpolate`` costs ~6 kernel
launches and ~0.1 ms of Python per image, on the training thread, between the training step's own
launches. The decoded images differ in size, so one gather copies them into a padded tensor (the crop
region only, mirrored where the flip asks, the last row and column repeated out to the padding) in
chunks of similar sizes, so that one large photo does not pad the whole batch to its size. Training
rows' box is their crop; validation rows' box is "resize the short side to val_resize(size),
centre-crop size" in source pixels. The shapes and boxes are on the host: decode never syncs with the
device to read them.

The antialiasing: with ``sampling_ratio=0`` roi_align averages ceil(bin) bilinear samples along each
side of a bin (the output pixel's footprint in source pixels), so a downscaled pixel is the mean of
the source pixels under it: a box filter one output pixel wide. PIL's and torch's antialiased
bilinear resize (the ``fast`` backend) weighs a triangle twice as wide, so these outputs are a little
sharper: on the tests' photos at 224x224, mean differences of up to 1.7 grey levels and contrast
within 1 % (tests/test_device_decode.py). Upscaling (a bin under one pixel) is one bilinear sample, the same as theirs.

torchvision 0.29 marks its image decoders deprecated in favour of TorchCodec; when they go, the
decode call in :meth:`EncodedBatch.decode` is the one line to port.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Sequence, Tuple

import torch
from torch.utils.data import default_collate
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.ops import roi_align

from .errors import DataError
from .pipelines import FastTrain, jpeg_frame, resized_hw, val_resize

VAL = -1  # a box row whose height is VAL asks for the validation transform


class EncodedImage(NamedTuple):
    """One sample: the image's bytes, its transform (top, left, height, width, flip, output size) and
    its name (a path, or a shard and index) for messages."""

    data: torch.Tensor
    box: torch.Tensor
    path: str


@dataclass
class EncodedBatch:
    """A batch of compressed images and their transforms, decoded where the model runs."""

    data: List[torch.Tensor]
    boxes: torch.Tensor  # int64 [N, 6], stays on the host: reading it is no device sync
    paths: List[str]

    def __len__(self) -> int:
        return len(self.data)

    def pin_memory(self, device=None) -> "EncodedBatch":
        # the DataLoader's pinning thread calls this: host-to-GPU copies of the bytes can then overlap
        return EncodedBatch([d.pin_memory() for d in self.data], self.boxes, self.paths)

    def decode(self, device: torch.device) -> torch.Tensor:
        """uint8 NCHW images on DEVICE, each transformed as its box row says."""
        try:
            images = decode_jpeg(self.data, mode=ImageReadMode.RGB, device=device)
        except RuntimeError as e:
            raise DataError(f"cannot decode a JPEG of this batch on {device} ({str(e).splitlines()[0]}); files: "
                            f"{', '.join(self.paths[:3])}{'...' if len(self.paths) > 3 else ''}; run with "
                            "--data-backend fast to find the broken file") from None
        regions = [_region(im.shape[-2], im.shape[-1], row) for im, row in zip(images, self.boxes.tolist())]
        size = int(self.boxes[0, 5])
        out = torch.empty((len(images), 3, size, size), dtype=torch.uint8, device=device)
        for chunk in _chunks(regions):
            order, pixels, boxes = _padded(images, regions, chunk, device)
            resized = roi_align(pixels.float(), boxes, (size, size), spatial_scale=1.0, sampling_ratio=0, aligned=True)
            out.index_copy_(0, order, resized.round_().clamp_(0, 255).to(torch.uint8))
        return out


class _Region(NamedTuple):
    """What one image's output reads: the HEIGHT x WIDTH pixels at (TOP, LEFT) of its decoded image,
    mirrored when FLIP, and the box (x1, y1, x2, y2) in them that roi_align resamples to the output."""

    top: int
    left: int
    height: int
    width: int
    flip: bool
    box: Tuple[float, float, float, float]


def _region(image_h: int, image_w: int, row: Sequence[int]) -> _Region:
    top, left, height, width, flip, size = row
    if height == VAL:  # Resize(size * 256 / 224) of the short side, then CenterCrop(size), as the others
        resized_h, resized_w = resized_hw(image_h, image_w, val_resize(size))
        sy, sx = image_h / resized_h, image_w / resized_w
        y0, x0 = int(round((resized_h - size) / 2.0)), int(round((resized_w - size) / 2.0))  # center_crop's anchor
        return _Region(0, 0, image_h, image_w, False, (x0 * sx, y0 * sy, (x0 + size) * sx, (y0 + size) * sy))
    bottom, right = min(top + height, image_h), min(left + width, image_w)  # as slicing clips
    return _Region(top, left, bottom - top, right - left, bool(flip), (0.0, 0.0, float(right - left), float(bottom - top)))


CHUNK_PIXELS = 1 << 26  # most padded pixels one resample call takes: 0.8 GB as float32
PADDING = 2  # a chunk takes another image while padding at most doubles its pixels


def _chunks(regions: Sequence[_Region]) -> List[List[int]]:
    """Indices of REGIONS in groups, each padded to its largest region: largest first, a group grows
    while padding at most doubles its pixels and stays under CHUNK_PIXELS (a group of one always
    fits), so one outsized photo does not pad a whole batch of ordinary ones to its size."""
    chunks: List[List[int]] = []
    height = width = area = 0
    for i in sorted(range(len(regions)), key=lambda i: -regions[i].height * regions[i].width):
        r = regions[i]
        h, w, a = max(height, r.height), max(width, r.width), area + r.height * r.width
        if chunks and (len(chunks[-1]) + 1) * h * w <= min(PADDING * a, CHUNK_PIXELS):
            chunks[-1].append(i)
        else:
            chunks.append([i])
            h, w, a = r.height, r.width, r.height * r.width
        height, width, area = h, w, a
    return chunks


def _padded(images: Sequence[torch.Tensor], regions: Sequence[_Region], chunk: List[int], device: torch.device):
    """The CHUNK's regions as one uint8 [n, 3, H, W] tensor, flipped where asked, each region's last row
    and column repeated out to H x W (as the edge clamps when resizing one image); with the chunk's
    indices and roi_align's boxes on DEVICE.

    One gather: the images are concatenated flat, and a window of W bytes at each row start
    (``unfold``) is indexed by row start and column, so no index tensor of the padded size exists.
    The index arithmetic runs on the host, where the shapes and boxes are.
    """
    rs = [regions[i] for i in chunk]
    height, width = max(r.height for r in rs), max(r.width for r in rs)
    flat = torch.cat([images[i].reshape(-1) for i in chunk] + [images[chunk[0]].new_zeros(width)])
    image_h, image_w = torch.tensor([images[i].shape[-2:] for i in chunk]).unbind(1)
    top, left, h, w, flip = torch.tensor([r[:5] for r in rs]).unbind(1)
    plane = image_h * image_w
    offset = (3 * plane).cumsum(0) - 3 * plane
    rows = top[:, None] + torch.minimum(torch.arange(height), h[:, None] - 1)
    starts = (offset[:, None] + torch.arange(3) * plane[:, None])[:, :, None] + (rows * image_w[:, None] + left[:, None])[:, None]
    cols = torch.minimum(torch.arange(width), w[:, None] - 1)
    cols = torch.where(flip[:, None].bool(), w[:, None] - 1 - cols, cols)
    n = len(chunk)
    index = _to(torch.cat([torch.tensor(chunk), starts.flatten(), cols.flatten()]), device)
    order, starts, cols = index[:n], index[n:n + starts.numel()], index[n + starts.numel():]
    boxes = _to(torch.tensor([[j, *r.box] for j, r in enumerate(rs)], dtype=torch.float32), device)
    pixels = flat.unfold(0, width, 1)[starts.view(n, 3, height, 1), cols.view(n, 1, 1, width)]
    return order, pixels, boxes


def _to(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """HOST on DEVICE without a host sync (a copy from pageable memory waits for the stream)."""
    return host if device.type == "cpu" else host.pin_memory().to(device, non_blocking=True)


class EncodedTrain:
    """bytes -> bytes + a RandomResizedCrop box and flip drawn from the JPEG header."""

    def __init__(self, image_size: int):
        self.size = image_size

    def __call__(self, buf: bytes, name: str = "") -> EncodedImage:
        frame = _jpeg_frame(buf)
        (top, left, h, w), flip = FastTrain.sample(frame.height, frame.width)
        return _encoded(buf, [top, left, h, w, int(flip), self.size], name)


class EncodedVal:
    """bytes -> bytes, for Resize + CenterCrop on the device."""

    def __init__(self, image_size: int):
        self.size = image_size

    def __call__(self, buf: bytes, name: str = "") -> EncodedImage:
        _jpeg_frame(buf)
        return _encoded(buf, [0, 0, VAL, VAL, 0, self.size], name)


def _jpeg_frame(buf: bytes):
    frame = jpeg_frame(buf)
    if frame is None:  # ImageFiles turns this into the bad-image error (or a skip)
        raise ValueError("not a JPEG file the device decoder reads (the device backend decodes JPEG only)")
    return frame


def _encoded(buf: bytes, row: List[int], path: str) -> EncodedImage:
    return EncodedImage(torch.frombuffer(bytearray(buf), dtype=torch.uint8), torch.tensor(row), path)


def device_backend(train: bool, image_size: int):
    return EncodedTrain(image_size) if train else EncodedVal(image_size)


def collate(batch):
    """default_collate, except that encoded images stay a list of byte tensors (their sizes differ)."""
    if batch and isinstance(batch[0][0], EncodedImage):
        images = [item[0] for item in batch]
        return (EncodedBatch([i.data for i in images], torch.stack([i.box for i in images]),
                             [i.path for i in images]),
                default_collate([item[1] for item in batch]))
    return default_collate(batch)
