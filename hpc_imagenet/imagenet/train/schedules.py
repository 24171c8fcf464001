"""Learning-rate schedules as pure functions of the global iteration: step, cosine, poly, ramp.

Each returns the multiplier of the peak learning rate at a 0-based iteration counted over the whole
run, so a run resumed in the middle of an epoch lands on exactly the value an uninterrupted run has
(the engine's LambdaLR only stores that count). torch's chained schedulers (LinearLR +
PolynomialLR, SequentialLR) keep state that a requeue with another global batch cannot re-derive,
and ``PolynomialLR`` has no end LR; hence these few formulas, each written after its source:

- ``step``: x ``gamma`` at each of ``milestones`` (whole epochs), pytorch/examples imagenet/main.py.
- ``cosine``: half a cosine from the peak after warm-up to ``cosine_end`` (torchvision's
  ``--lr-min`` over the peak) at the last epoch.
- ``exponential``: x ``gamma`` per whole epoch after warm-up (torchvision's ExponentialLR).
- ``poly``: MLPerf ResNet-50's ``PolynomialDecayWithWarmup`` (mlcommons/training,
  ``image_classification/tensorflow2/lars_util.py``): after ``W`` warm-up steps, with
  ``D = total_steps - W + 1`` and ``t = iteration - W``:
  ``(1 - end) * (1 - min(t, D) / D) ** power + end`` (``end``: the end LR over the peak LR).
- ``ramp``: FFCV's ``cyclic`` schedule (libffcv/ffcv-imagenet ``train_imagenet.py``): per epoch,
  ``interp(epoch, [0, peak_epoch, epochs], [start, 1, 0])`` (``start`` = 1e-4 there), and per step
  the straight line from this epoch's value to the next one's, as its training loop does.

Warm-up (``step``, ``cosine``, ``poly``): linear over ``warmup_epochs``. With a start factor ``s``
(torchvision's ``--lr-warmup-decay``; MLPerf's is 0) the multiplier at iteration ``i`` is
``s + (1 - s) * i / W``; without one, ``(i + 1) / W`` (this project's long-standing rule, which
reaches the peak on the last warm-up step). torchvision's ``--lr-warmup-method constant`` holds ``s``
for the whole warm-up instead.

timm's ``CosineLRScheduler`` as its ``train.py`` builds it (``timm/scheduler/cosine_lr.py``,
``_get_lr``; ``timm/scheduler/scheduler_factory.py``): with ``cosine_from_start`` the cosine is
``end + (1 - end) * 0.5 * (1 + cos(pi * epoch / epochs))`` over the whole run, counted from epoch 0
(its ``warmup_prefix`` is off), and the warm-up, from its ``warmup_lr`` (``s`` = warmup_lr / peak),
replaces the first ``warmup_epochs`` of it; ``per_epoch`` holds each epoch at the value of its first
step, as timm steps its scheduler once per epoch (``t_in_epochs``, ``lr_scheduler.step(epoch + 1)``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

KINDS = ("step", "cosine", "poly", "ramp", "exponential")


@dataclass(frozen=True)
class Schedule:
    """What a schedule needs besides the iteration; epochs may be fractional."""
    kind: str
    epochs: float
    warmup_epochs: float = 0.0
    warmup_start: Optional[float] = None
    warmup_method: str = "linear"
    milestones: Sequence[int] = (30, 60, 80)
    gamma: float = 0.1
    power: float = 2.0
    end_factor: float = 0.0
    peak_epoch: float = 2.0
    ramp_start: float = 1e-4
    cosine_end: float = 0.0
    per_epoch: bool = False  # one value per epoch, the one at its first step (timm's, torchvision's stepping)
    cosine_from_start: bool = False  # the cosine counts from epoch 0, not from the warm-up's end (timm's)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown LR schedule {self.kind!r}; choose one of {', '.join(KINDS)}")


def lr_factor(iteration: int, steps_per_epoch: int, schedule: Schedule) -> float:
    """Multiplier of the peak LR at ITERATION (0-based, over the whole run)."""
    if schedule.per_epoch:
        iteration -= iteration % steps_per_epoch
    if schedule.kind == "ramp":
        return _ramp(iteration, steps_per_epoch, schedule)
    warmup_steps = schedule.warmup_epochs * steps_per_epoch
    if warmup_steps > 0 and iteration < warmup_steps:
        if schedule.warmup_method == "constant":
            return schedule.warmup_start if schedule.warmup_start is not None else 1.0
        return _warmup(iteration, warmup_steps, schedule.warmup_start)
    epoch = iteration / steps_per_epoch
    if schedule.kind == "cosine":
        start = 0.0 if schedule.cosine_from_start else schedule.warmup_epochs
        progress = (epoch - start) / max(schedule.epochs - start, 1e-8)
        end = schedule.cosine_end
        return end + (1 - end) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    if schedule.kind == "exponential":
        return schedule.gamma ** int(epoch - schedule.warmup_epochs)
    if schedule.kind == "poly":
        return _poly(iteration - warmup_steps, schedule.epochs * steps_per_epoch - warmup_steps + 1, schedule)
    return schedule.gamma ** sum(1 for milestone in schedule.milestones if int(epoch) >= milestone)


def _warmup(iteration: int, warmup_steps: float, start: Optional[float]) -> float:
    if start is None:
        return (iteration + 1) / warmup_steps
    return start + (1 - start) * iteration / warmup_steps


def _poly(step: float, decay_steps: float, schedule: Schedule) -> float:
    remaining = 1 - min(step, decay_steps) / decay_steps
    return (1 - schedule.end_factor) * remaining ** schedule.power + schedule.end_factor


def _ramp_at_epoch(epoch: int, schedule: Schedule) -> float:
    """FFCV's per-epoch value: linear from RAMP_START at 0 to 1 at the peak, to 0 at the last epoch."""
    peak, end = schedule.peak_epoch, schedule.epochs
    if epoch <= 0:
        return schedule.ramp_start
    if epoch < peak:
        return schedule.ramp_start + (1 - schedule.ramp_start) * epoch / peak
    if epoch < end:
        return (end - epoch) / (end - peak)
    return 0.0


def _ramp(iteration: int, steps_per_epoch: int, schedule: Schedule) -> float:
    epoch, step = divmod(iteration, steps_per_epoch)
    here, there = _ramp_at_epoch(epoch, schedule), _ramp_at_epoch(epoch + 1, schedule)
    return here + (there - here) * step / steps_per_epoch
