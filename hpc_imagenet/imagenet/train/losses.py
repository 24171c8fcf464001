"""The training loss: softmax cross-entropy (label smoothing, soft targets) or binary cross-entropy.

``--bce-loss`` is the loss of timm's "ResNet strikes back" recipes (Wightman et al. 2021, section
3.2): one sigmoid per class against one-hot targets, or the soft targets Mixup and CutMix make,
optionally binarised at ``--bce-target-thresh``. torch has the loss itself
(``binary_cross_entropy_with_logits``); what is written here is only the target handling timm's
``BinaryCrossEntropy`` does, so that timm is not a dependency for one function.

Label smoothing, as timm applies it: ``(1 - e) * target + e / classes``. With Mixup or CutMix timm
smooths inside the mix (``timm/data/mixup.py``, ``mixup_target``: ``lam * smooth(y1) + (1 - lam) *
smooth(y2)``) and thresholds the result in the loss. Smoothing is affine and the two weights sum to 1,
so smoothing the mixed soft targets here, before the threshold, gives exactly timm's targets; the
mix itself (torchvision's v2 ``MixUp``/``CutMix``) stays unsmoothed. Softmax cross-entropy needs
nothing of this: ``CrossEntropyLoss(label_smoothing=e)`` smooths soft targets the same way.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class BinaryCrossEntropy(nn.Module):
    """Mean binary cross-entropy over every (sample, class) of logits against class ids or soft targets.

    The targets (class ids as one-hot rows, or the mixed soft targets) are smoothed as timm does
    (see :func:`targets`); THRESH then turns them into 0/1 (timm's ``target_threshold``)."""

    def __init__(self, smoothing: float = 0.0, thresh: Optional[float] = None):
        super().__init__()
        self.smoothing, self.thresh = smoothing, thresh

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(
            logits, targets(target, logits.shape[-1], self.smoothing, self.thresh).to(logits.dtype))


def targets(target: torch.Tensor, classes: int, smoothing: float = 0.0,
            thresh: Optional[float] = None) -> torch.Tensor:
    """The BCE targets of class ids or soft (mixed) targets: one-hot, smoothed to ``(1 - smoothing) *
    target + smoothing / classes``, then 1 above THRESH and 0 elsewhere when THRESH is given."""
    if target.ndim == 1:  # class ids
        target = torch.zeros(target.shape[0], classes, device=target.device).scatter_(1, target.view(-1, 1), 1.0)
    if smoothing:
        target = target * (1.0 - smoothing) + smoothing / classes
    if thresh is not None:
        target = target.gt(thresh).to(target.dtype)
    return target


def build(cfg) -> nn.Module:
    """The loss of the optimisation settings CFG."""
    if cfg.bce_loss:
        return BinaryCrossEntropy(cfg.label_smoothing, cfg.bce_target_thresh)
    return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
