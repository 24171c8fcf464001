"""The PIL backends: ``baseline`` (pytorch/examples' pipeline, float output: the reference every
speed-up is measured against) and ``pil`` (PIL decode + torchvision v2 transforms, uint8 output)."""
from __future__ import annotations

import io
from typing import Callable, Optional, Tuple

import torch
from PIL import Image
from torchvision import transforms
from torchvision.transforms import v2

from hpc_imagenet.imagenet.data.decode.augment import NONE, Augmentation, policy, uint8_ops
from hpc_imagenet.imagenet.data.decode.base import CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD, Transform, val_resize


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
                     crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE) -> Transform:
    """pytorch/examples imagenet/main.py's transforms on ImageFolder's loader; float output. Validation
    resizes the short side to RESIZE_SIZE (default: image_size * 256 / 224), then crops IMAGE_SIZE.
    AUGMENT's policy and erasing go where torchvision's reference puts them: the policy on the PIL
    image after the flip, erasing (to 0, the mean) after normalising."""
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    mode = augment.mode
    if train:
        ops = [transforms.RandomResizedCrop(image_size, scale=crop_scale, ratio=augment.crop_ratio,
                                            interpolation=mode),
               transforms.RandomHorizontalFlip(), policy(augment, tensor=False), transforms.ToTensor(), normalize,
               transforms.RandomErasing(p=augment.erase, value=0) if augment.erase > 0 else None]
    else:
        ops = [transforms.Resize(resize_size or val_resize(image_size), interpolation=mode),
               transforms.CenterCrop(image_size), transforms.ToTensor(), normalize]
    return _Composed(transforms.Compose([op for op in ops if op is not None]))


def pil_backend(train: bool, image_size: int, resize_size: Optional[int] = None,
                crop_scale: Tuple[float, float] = CROP_SCALE, augment: Augmentation = NONE) -> Transform:
    """PIL decode + torchvision v2 transforms, producing uint8 CHW tensors (validation as baseline's);
    AUGMENT's policy and erasing on the uint8 crop."""
    mode = augment.mode
    if train:
        ops = [v2.RandomResizedCrop(image_size, scale=crop_scale, ratio=augment.crop_ratio, interpolation=mode,
                                    antialias=True),
               v2.RandomHorizontalFlip(), v2.PILToTensor(), uint8_ops(augment)]
    else:
        ops = [v2.Resize(resize_size or val_resize(image_size), interpolation=mode, antialias=True),
               v2.CenterCrop(image_size), v2.PILToTensor()]
    return _Composed(v2.Compose([op for op in ops if op is not None]))
