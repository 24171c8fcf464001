"""What every decoding backend shares: the transform's signature and ImageNet's constants."""
from __future__ import annotations

from typing import Callable

import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_SCALE = (0.08, 1.0)  # RandomResizedCrop's default area range (--train-crop-scale), every backend's default
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)

Transform = Callable[[bytes, str], torch.Tensor]  # (encoded image, its name for messages) -> CHW image


def resample_options(mode: str) -> dict:
    """torch's interpolate options for MODE as torchvision resizes: antialiased for bilinear and bicubic,
    no filter for nearest (which takes neither option)."""
    return {} if mode == "nearest" else {"antialias": True, "align_corners": False}


def val_resize(image_size: int) -> int:
    """The short side validation resizes to before the centre crop (256 for 224, as ImageNet)."""
    return int(round(image_size * 256 / 224))
