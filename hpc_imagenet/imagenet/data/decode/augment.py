"""The per-image augmentation after the crop and flip: a policy (TrivialAugmentWide, RandAugment,
AutoAugment, AugMix) and random erasing, for every per-sample backend.

The operations are torchvision's v2 transforms, which take the uint8 CHW tensors the ``fast``,
``pil`` and ``device`` backends make (and ``baseline``'s PIL images): nothing of their arithmetic
is written here. Their random draws come from torch's CPU generator, which the loader seeds per
sample (:class:`hpc_imagenet.imagenet.data.loader.ImageFiles`), so a sample's augmentation depends on the run
seed, the epoch and its index only, and a resumed run draws what an uninterrupted one does. The
``dali`` backend builds the same policies from DALI's own ``auto_aug`` module
(:mod:`.dali`).

Two things torchvision does not have:

- **RandAugment's magnitude spread** (timm's ``mstd``, used by "ResNet strikes back"): each image
  draws its magnitude from a normal distribution around ``--ra-magnitude``, clipped to the bins
  (timm draws per operation; one draw per image is close and keeps torchvision's class intact);
- **erasing on uint8**: torchvision's reference erases to 0 after normalising, i.e. to the mean
  pixel; here the images are normalised later, on the device, so the rectangle gets the mean
  pixel in uint8 (the same up to rounding). ``baseline`` (float, normalised in the worker) erases
  to 0 as torchvision's reference does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
from torchvision.transforms import InterpolationMode, v2

from hpc_imagenet.imagenet.data.decode.base import CROP_RATIO, IMAGENET_MEAN

MEAN_PIXEL = [round(255 * m) for m in IMAGENET_MEAN]  # what erasing to 0 after normalising gives


@dataclass(frozen=True)
class Augmentation:
    """The data section's augmentation settings, as the backends need them."""
    policy: Optional[str] = None       # --auto-augment
    magnitude: int = 9                 # --ra-magnitude (of 31 bins)
    magnitude_std: float = 0.0         # --ra-magnitude-std
    severity: int = 3                  # --augmix-severity
    erase: float = 0.0                 # --random-erase
    interpolation: str = "bilinear"    # --interpolation
    crop_ratio: Tuple[float, float] = CROP_RATIO  # --train-crop-ratio (the training crop's aspect ratios)

    @classmethod
    def of(cls, data) -> "Augmentation":
        """From the data settings DATA."""
        return cls(data.auto_augment, data.ra_magnitude, data.ra_magnitude_std, data.augmix_severity,
                   data.random_erase, data.interpolation, tuple(data.train_crop_ratio))

    @classmethod
    def for_val(cls, data) -> "Augmentation":
        """Validation's: no policy, the resize's interpolation (--val-interpolation, else --interpolation)."""
        return cls(interpolation=data.val_interpolation or data.interpolation)

    @property
    def active(self) -> bool:
        """Whether anything runs after the crop (a policy or erasing)."""
        return self.policy is not None or self.erase > 0

    @property
    def mode(self) -> InterpolationMode:
        return InterpolationMode(self.interpolation)

    @property
    def tensor_mode(self) -> InterpolationMode:
        """The policy's resampling on tensors: torchvision's geometric ops take nearest or bilinear there."""
        return InterpolationMode.NEAREST if self.interpolation == "nearest" else InterpolationMode.BILINEAR


NONE = Augmentation()


class SpreadRandAugment(v2.RandAugment):
    """RandAugment whose magnitude each image draws from N(magnitude, std), clipped to the bins."""

    def __init__(self, magnitude: int, std: float, **kwargs):
        super().__init__(magnitude=magnitude, **kwargs)
        self.mean, self.std = magnitude, std

    def forward(self, *inputs):
        drawn = self.mean + self.std * float(torch.randn(()))
        self.magnitude = int(round(min(max(drawn, 0.0), self.num_magnitude_bins - 1)))
        return super().forward(*inputs)


def policy(aug: Augmentation, tensor: bool = True) -> Optional[v2.Transform]:
    """torchvision's transform for --auto-augment, as its train.py builds it (None: no policy), for
    uint8 tensors (TENSOR) or PIL images (bicubic resampling only there)."""
    if aug.policy is None:
        return None
    mode = aug.tensor_mode if tensor else aug.mode
    if aug.policy == "ra":
        if aug.magnitude_std:
            return SpreadRandAugment(aug.magnitude, aug.magnitude_std, interpolation=mode)
        return v2.RandAugment(magnitude=aug.magnitude, interpolation=mode)
    if aug.policy == "ta_wide":
        return v2.TrivialAugmentWide(interpolation=mode)
    if aug.policy == "augmix":
        return v2.AugMix(severity=aug.severity, interpolation=mode)
    return v2.AutoAugment(v2.AutoAugmentPolicy(aug.policy), interpolation=mode)


def uint8_ops(aug: Augmentation) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The policy, then erasing to the mean pixel, on a uint8 CHW image (None: nothing to do)."""
    ops: List[v2.Transform] = [op for op in (policy(aug),) if op is not None]
    if aug.erase > 0:
        ops.append(v2.RandomErasing(p=aug.erase, value=MEAN_PIXEL))
    if not ops:
        return None
    return ops[0] if len(ops) == 1 else v2.Compose(ops)
