"""The PIL backends: ``baseline`` (pytorch/examples' pipeline, float output: the reference every
speed-up is measured against) and ``pil`` (PIL decode + torchvision v2 transforms, uint8 output)."""
from __future__ import annotations

import io
from typing import Callable, Optional, Tuple

import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import v2

from .base import CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD, Transform, val_resize


def pil_rgb(data: bytes) -> Image.Image:
    """Decoded RGB image, as torchvision ImageFolder's PIL loader gives it (convert forces the decode)."""
    return Image.open(io.BytesIO(data)).convert("RGB")


class _Composed:
    """bytes -> ops(ImageFolder's PIL RGB image); a class rather than a lambda so spawned workers can
    pickle it."""

    def __init__(self, ops: Callable):
        self.ops = ops

    def __call__(self, data: bytes, name: str = "") -> torch.Tensor:
        return self.ops(pil_rgb(data))


def baseline_backend(train: bool, image_size: int, resize_size: Optional[int] = None,
                     crop_scale: Tuple[float, float] = CROP_SCALE) -> Transform:
    """pytorch/examples imagenet/main.py's transforms on ImageFolder's loader; float output. Validation
    resizes the short side to RESIZE_SIZE (default: image_size * 256 / 224), then crops IMAGE_SIZE."""
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        ops = transforms.Compose([transforms.RandomResizedCrop(image_size, scale=crop_scale),
                                  transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    else:
        ops = transforms.Compose([transforms.Resize(resize_size or val_resize(image_size)),
                                  transforms.CenterCrop(image_size), transforms.ToTensor(), normalize])
    return _Composed(ops)


def pil_backend(train: bool, image_size: int, resize_size: Optional[int] = None,
                crop_scale: Tuple[float, float] = CROP_SCALE) -> Transform:
    """PIL decode + torchvision v2 transforms, producing uint8 CHW tensors (validation as baseline's)."""
    if train:
        ops = v2.Compose([v2.RandomResizedCrop(image_size, scale=crop_scale, antialias=True), v2.RandomHorizontalFlip(),
                         v2.PILToTensor()])
    else:
        ops = v2.Compose([v2.Resize(resize_size or val_resize(image_size), antialias=True), v2.CenterCrop(image_size),
                         v2.PILToTensor()])
    return _Composed(ops)
