"""Stragglers at run time: which rank, on which host, is slower than the others.

At each print boundary every rank contributes its mean step time and data-wait time over the
interval, in the boundary's one small all-gather (see :meth:`hpc_imagenet.imagenet.train.trainer.Trainer._boundary`).
In synchronous data-parallel training every rank's step lasts as long as the slowest rank's,
because the gradient all-reduce waits for it, so the wall time per step hardly differs between
ranks; what differs is where each rank waited. A rank slowed in its data path (a slow disk, a busy
node's loader workers) waits for its batches while the others wait inside the all-reduce. So a rank
counts as slow when its step time or its data-wait time exceeds the median rank's by more than
``--straggler-threshold`` times the median step time. The median is the lower middle value for an
even count of ranks, so with two ranks the faster one is the reference.

Not seen: a rank slowed in its computation makes the others wait inside backward(), which only
timing the all-reduce itself would show (the profiler does, --profile-steps).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence

from hpc_imagenet.imagenet.process import group


@dataclass
class RankSummary:
    """One rank's times over the run's print intervals (milliseconds per step)."""
    rank: int
    host: str
    intervals: int = 0
    step_ms_mean: float = 0.0
    data_ms_mean: float = 0.0
    step_ms_max: float = 0.0
    data_ms_max: float = 0.0
    slowest_intervals: int = 0  # intervals in which this rank was named a straggler

    def add(self, step_ms: float, data_ms: float) -> None:
        n = self.intervals = self.intervals + 1
        self.step_ms_mean += (step_ms - self.step_ms_mean) / n
        self.data_ms_mean += (data_ms - self.data_ms_mean) / n
        self.step_ms_max, self.data_ms_max = max(self.step_ms_max, step_ms), max(self.data_ms_max, data_ms)


class StragglerWatch:
    def __init__(self, hosts: Sequence[str], threshold: float):
        self.threshold = threshold
        self.ranks = [RankSummary(rank, host) for rank, host in enumerate(hosts)]

    @classmethod
    def for_run(cls, threshold: float) -> "StragglerWatch":
        return cls(group.hosts(), threshold)

    def observe(self, times: List[Sequence[float]]) -> Optional[str]:
        """TIMES: (step_ms, data_ms) per rank for one interval. A line naming the slowest rank when it
        is slower than the threshold allows, else None."""
        for summary, (step_ms, data_ms) in zip(self.ranks, times):
            summary.add(step_ms, data_ms)
        if self.threshold <= 0 or len(times) < 2:
            return None
        median_step = statistics.median_low(t[0] for t in times)
        median_data = statistics.median_low(t[1] for t in times)
        excess = [max(step - median_step, data - median_data) for step, data in times]
        rank = max(range(len(times)), key=excess.__getitem__)
        if median_step <= 0 or excess[rank] <= self.threshold * median_step:
            return None
        slow = self.ranks[rank]
        slow.slowest_intervals += 1
        step_ms, data_ms = times[rank]
        return (f"straggler: rank {rank} on {slow.host} is {100 * excess[rank] / median_step:.0f}% of a step "
                f"slower than the median rank: step {step_ms:.1f} ms, data wait {data_ms:.1f} ms (median "
                f"{median_step:.1f} ms, {median_data:.1f} ms)")

    def summary(self) -> List[dict]:
        return [asdict(r) for r in self.ranks]
