"""Last step of the data flow, on the device: uint8 batches -> normalised float.

Loaders hand over uint8 CHW batches (a quarter of the bytes of float through worker pipes and
host-to-device copies); the engine normalises them here, on the device.
"""
from __future__ import annotations

import torch

from hpc_imagenet.imagenet.data.decode.base import IMAGENET_MEAN, IMAGENET_STD
from hpc_imagenet.imagenet.data.decode.device import EncodedBatch


class DeviceNormalizer:
    """uint8 NCHW batches -> normalised float on the device (float batches pass through; encoded
    batches of the device backend are decoded first)."""

    def __init__(self, device: torch.device, channels_last: bool):
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if isinstance(images, EncodedBatch):  # the device backend: decode here
            images = images.decode(self.device)
        images = images.to(self.device, non_blocking=True)
        if images.dtype == torch.uint8:
            images = (images.float() - self.mean) / self.std
        return images.contiguous(memory_format=self.memory_format)
