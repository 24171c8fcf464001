"""SGD with momentum, linear learning-rate scaling, warm-up and the step or cosine schedule.

The learning rate follows Goyal et al. (2017): ``lr = base_lr * global_batch / 256`` with a linear
warm-up (5 epochs by default when that exceeds the base rate). The schedule is evaluated per
iteration so warm-up is smooth and a mid-epoch resume lands on the same value.
"""
from __future__ import annotations

import math
from typing import List

import torch
from torch import nn


def peak_lr(cfg, global_batch: int) -> float:
    return cfg.lr * global_batch / 256 if cfg.lr_scaling == "linear" else cfg.lr


def warmup_epochs(cfg, lr: float) -> float:
    if cfg.warmup_epochs is not None:
        return cfg.warmup_epochs
    return 5.0 if lr > cfg.lr else 0.0


def param_groups(model: nn.Module, weight_decay: float, no_bn_wd: bool) -> List[dict]:
    if not no_bn_wd:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            is_norm = isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm))
            (no_decay if is_norm or name == "bias" else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(param_groups(model, cfg.weight_decay, cfg.no_bn_wd), lr=lr, momentum=cfg.momentum)


def lr_factor(iteration: int, steps_per_epoch: int, cfg, warmup: float) -> float:
    """Multiplier of the peak lr at ITERATION (0-based, counted over the whole run)."""
    epoch = iteration / steps_per_epoch
    if warmup > 0 and epoch < warmup:
        return (iteration + 1) / (warmup * steps_per_epoch)
    if cfg.lr_schedule == "cosine":
        progress = (epoch - warmup) / max(cfg.epochs - warmup, 1e-8)
        return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return 0.1 ** sum(1 for milestone in cfg.lr_steps if int(epoch) >= milestone)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg, steps_per_epoch: int, warmup: float):
    """A per-iteration LambdaLR; its state_dict holds only the iteration count."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda it: lr_factor(it, steps_per_epoch, cfg, warmup))
