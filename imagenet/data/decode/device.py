"""The ``device`` data backend: JPEG bytes through the loader, decoding on the training device.

Loader workers only read each image's bytes (from a file or a shard) and draw its augmentation (the crop box from the JPEG header,
with the ``fast`` backend's rule and distribution, and the flip); the batch crosses the worker pipe
as compressed bytes (~110 KB an ImageNet photo instead of 150 KB of pixels). The training process
then decodes the whole batch in one ``torchvision.io.decode_jpeg`` call on its device (nvJPEG on a
GPU, libjpeg-turbo on a CPU) and crops, flips and resizes each image there. It is for nodes with
few CPU cores per GPU, where CPU decoding cannot keep up; :class:`imagenet.data.normalize.DeviceNormalizer`
calls :meth:`EncodedBatch.decode`, so the training loop is unchanged.

torchvision 0.29 marks its image decoders deprecated in favour of TorchCodec; when they go, the
decode call in :meth:`EncodedBatch.decode` is the one line to port.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Sequence

import torch
from torch.utils.data import default_collate
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms.v2 import functional as TF

from ...errors import DataError
from .base import val_resize
from .fast import FastTrain, resized_hw
from .jpeg import jpeg_frame

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
        return torch.stack([_transform(im, row) for im, row in zip(images, self.boxes.tolist())])


def _transform(image: torch.Tensor, row: Sequence[int]) -> torch.Tensor:
    top, left, height, width, flip, size = row
    if height == VAL:  # Resize(size * 256 / 224) of the short side, then CenterCrop(size), as the others
        return TF.center_crop(_resize(image, *resized_hw(*image.shape[-2:], val_resize(size))), [size, size])
    crop = image[:, top:top + height, left:left + width]
    return _resize(crop.flip(-1) if flip else crop, size, size)


def _resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Antialiased bilinear resize of a uint8 CHW image; through float, which every device supports."""
    out = torch.nn.functional.interpolate(image.unsqueeze(0).float(), size=(height, width), mode="bilinear",
                                          align_corners=False, antialias=True)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


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
