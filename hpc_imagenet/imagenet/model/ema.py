"""An exponential moving average (EMA) of the model's weights, evaluated beside the model.

Built from torch.optim.swa_utils: an ``AveragedModel`` with ``get_ema_multi_avg_fn(decay)`` and
``use_buffers=True`` (BatchNorm's running statistics are averaged too, as torchvision's reference
``ExponentialMovingAverage`` does). The first update copies the weights; each later one is
``ema = decay * ema + (1 - decay) * weights``.

The cadence follows torchvision's references/classification/train.py: one update every
``every_steps`` optimizer steps (``--model-ema-steps``), the decay adjusted to the global batch
and the number of epochs (:func:`adjusted_decay`), and during the LR warm-up each update is
followed by a restart (the first update after warm-up copies the weights: the average would otherwise
remember the untrained start). Updates are decided by the
global iteration alone, so a resumed run, which restores :meth:`WeightAverage.state_dict`, averages
exactly the steps an uninterrupted one does.
"""
from __future__ import annotations

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def adjusted_decay(decay: float, global_batch: int, every_steps: int, epochs: float) -> float:
    """torchvision's adjustment: ``1 - min(1, (1 - decay) * global_batch * every_steps / epochs)``,
    which keeps the average's horizon, in epochs, roughly independent of the batch and cadence."""
    alpha = min(1.0, (1.0 - decay) * global_batch * every_steps / epochs)
    return 1.0 - alpha


class WeightAverage:
    """The EMA of MODEL (the bare module, not a DDP wrapper) on MODEL's device."""

    def __init__(self, model: torch.nn.Module, decay: float, every_steps: int = 1, warmup_steps: float = 0.0):
        if not 0.0 <= decay < 1.0 or every_steps < 1:
            raise ValueError(f"EMA decay must be in [0, 1) and its cadence >= 1 step (got {decay}, {every_steps})")
        self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
        self.decay, self.every_steps, self.warmup_steps = decay, every_steps, warmup_steps

    @property
    def module(self) -> torch.nn.Module:
        """The averaged network, to evaluate (in eval mode, like the model)."""
        return self.averaged.module

    def after_step(self, model: torch.nn.Module, iteration: int) -> bool:
        """Call after optimizer step ITERATION (0-based, global); returns whether it averaged."""
        if (iteration + 1) % self.every_steps:
            return False
        self.averaged.update_parameters(model)
        if iteration < self.warmup_steps:
            self.averaged.n_averaged.zero_()  # during warm-up: the next update starts afresh
        return True

    def state_dict(self) -> dict:
        return self.averaged.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.averaged.load_state_dict(state)
