"""The training resolution as a function of the epoch: FFCV's progressive resizing.

libffcv/ffcv-imagenet ``train_imagenet.py`` (``get_resolution``): ``min_res`` up to and including
epoch ``start_ramp``, ``max_res`` from epoch ``end_ramp`` on, and in between the straight line
from one to the other rounded to the nearest multiple of 32 (``round`` rounds halves to even, as
numpy's ``np.round`` there does). Training at a lower resolution early is cheaper per image; the
network ends at the higher one and is validated higher still (the validation resize and crop
sizes are separate settings).
"""
from __future__ import annotations

from dataclasses import dataclass

MULTIPLE = 32


@dataclass(frozen=True)
class ResolutionRamp:
    min_res: int
    max_res: int
    start_ramp: int
    end_ramp: int

    def problem(self) -> str:
        """'' when the ramp works, else what to change (one line, flag names)."""
        if not 16 <= self.min_res <= self.max_res:
            return f"--min-res {self.min_res} / --max-res {self.max_res}: need 16 <= min-res <= max-res"
        if not 0 <= self.start_ramp <= self.end_ramp:
            return f"--start-ramp {self.start_ramp} / --end-ramp {self.end_ramp}: need 0 <= start-ramp <= end-ramp"
        return ""

    def at(self, epoch: int) -> int:
        """The training crop size for EPOCH (0-based)."""
        if epoch <= self.start_ramp:
            return self.min_res
        if epoch >= self.end_ramp:
            return self.max_res
        fraction = (epoch - self.start_ramp) / (self.end_ramp - self.start_ramp)
        return int(round((self.min_res + fraction * (self.max_res - self.min_res)) / MULTIPLE)) * MULTIPLE
