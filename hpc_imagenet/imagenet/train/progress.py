"""What a run has done so far: the progress a requeue must keep, and the steady-state throughput.

The loop (hpc_imagenet.imagenet.train.trainer) updates both; checkpoints carry the first, run.json the second.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

import torch

from hpc_imagenet.imagenet.train.metrics import peak_memory_bytes


@dataclass
class TrainState:
    """Progress that must survive a requeue, next to the model/optimizer/scheduler state."""
    epoch: int = 0
    step_in_epoch: int = 0
    best_top1: float = 0.0
    elapsed_s: float = 0.0
    history: List[dict] = field(default_factory=list)


@dataclass
class Throughput:
    """Steady-state training throughput of this rank, summed over epochs."""
    images: int = 0
    seconds: float = 0.0
    data_s: float = 0.0
    steps: int = 0
    warmup_steps: int = 0

    def as_dict(self, world_size: int, device: torch.device) -> dict:
        per_proc = self.images / self.seconds if self.seconds > 0 else None
        step_ms = 1000 * self.seconds / self.steps if self.steps else None
        data_ms = 1000 * self.data_s / self.steps if self.steps else None
        return {"images_per_s": per_proc * world_size if per_proc else None,
                "images_per_s_per_process": per_proc, "step_time_ms": step_ms, "data_time_ms": data_ms,
                "compute_time_ms": step_ms - data_ms if step_ms is not None else None,
                "warmup_steps": self.warmup_steps, "measured_steps": self.steps,
                "peak_memory_bytes": peak_memory_bytes(device)}

    def count(self, seconds: float, data_s: float, steps: int, images: int, warm: int) -> None:
        """Add one epoch's steady part: STEPS steps of IMAGES images in SECONDS, after WARM warm-up steps."""
        self.seconds += seconds
        self.images += images
        self.steps += steps
        self.data_s += data_s
        self.warmup_steps += warm
