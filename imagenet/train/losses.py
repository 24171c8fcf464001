"""The training loss: softmax cross-entropy (label smoothing, soft targets) or binary cross-entropy.

``--bce-loss`` is the loss of timm's "ResNet strikes back" recipes (Wightman et al. 2021, section
3.2): one sigmoid per class against one-hot targets, or the soft targets Mixup and CutMix make,
optionally binarised at ``--bce-target-thresh``. torch has the loss itself
(``binary_cross_entropy_with_logits``); what is written here is only the target handling timm's
``BinaryCrossEntropy`` does, so that timm is not a dependency for one function.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class BinaryCrossEntropy(nn.Module):
    """Mean binary cross-entropy over every (sample, class) of logits against class ids or soft targets.

    Class ids become one-hot rows, smoothed as timm does (``smoothing / classes`` off target, ``1 -
    smoothing + smoothing / classes`` on it); THRESH turns soft targets into 0/1 (timm's
    ``target_threshold``)."""

    def __init__(self, smoothing: float = 0.0, thresh: Optional[float] = None):
        super().__init__()
        self.smoothing, self.thresh = smoothing, thresh

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        classes = logits.shape[-1]
        if target.ndim == 1:  # class ids
            off = self.smoothing / classes
            dense = torch.full_like(logits, off)
            target = dense.scatter_(1, target.view(-1, 1), 1.0 - self.smoothing + off)
        if self.thresh is not None:
            target = target.gt(self.thresh).to(logits.dtype)
        return nn.functional.binary_cross_entropy_with_logits(logits, target)


def build(cfg) -> nn.Module:
    """The loss of the optimisation settings CFG."""
    if cfg.bce_loss:
        return BinaryCrossEntropy(cfg.label_smoothing, cfg.bce_target_thresh)
    return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
