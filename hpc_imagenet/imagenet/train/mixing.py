"""Mixup and CutMix of a training batch, from torchvision.transforms.v2.

As torchvision's references/classification/train.py: with both ``--mixup-alpha`` and
``--cutmix-alpha`` each batch gets one of the two, chosen at random with equal odds. They run on
the normalised batch on the training device (v2's ``MixUp``/``CutMix`` take a batch of images and
integer labels and return the mixed images and soft labels), after the loader, so every data
backend gets them. The loss takes the soft labels (``CrossEntropyLoss`` accepts class
probabilities, label smoothing included; ``--bce-loss`` smooths them before its threshold, which is
timm's smoothing inside the mix: see :mod:`hpc_imagenet.imagenet.train.losses`); accuracy counts the label with the
largest weight.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from torchvision.transforms import v2

Mix = Callable[[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def build(mixup_alpha: float, cutmix_alpha: float, num_classes: int) -> Optional[Mix]:
    """The batch transform, or None when both alphas are 0."""
    chosen = []
    if mixup_alpha > 0:
        chosen.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        chosen.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    if not chosen:
        return None
    return chosen[0] if len(chosen) == 1 else v2.RandomChoice(chosen)


def hard_labels(target: torch.Tensor) -> torch.Tensor:
    """Class ids for the accuracy meters: soft labels' largest weight, class ids unchanged."""
    return target.argmax(dim=1) if target.ndim == 2 else target
