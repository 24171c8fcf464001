"""Repeated measurements of one point, folded into one: mean, standard deviation and count.

A sweep that ran a node count twice (a resumed or repeated SLURM sweep), or several sweeps of the
same settings, give several records at one x; a figure draws their mean with the standard deviation
as an error bar (as the seed's data-loading experiment plots 5 runs per worker count), never one
line through each repeat.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from hpc_imagenet.harness.core.records import group_by


@dataclass(frozen=True)
class Point:
    """One x with its repeats: the mean and sample standard deviation (0 for a single record)."""

    x: float
    mean: float
    std: float
    records: tuple  # the records behind it, in the order given

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def spread(self) -> Optional[float]:
        """The standard deviation where the point was repeated (None for a single record)."""
        return self.std if self.n > 1 else None

    @property
    def sources(self) -> str:
        """The records behind it, as a table names them (file:line, ...)."""
        return ", ".join(r.source for r in self.records)


def aggregate(recs: Sequence[dict], x_of: Callable[[dict], float], y_of: Callable[[dict], float]) -> List[Point]:
    """One Point per distinct x, sorted by x."""
    by_x = group_by(recs, x_of)
    return [Point(x, statistics.fmean(ys), statistics.stdev(ys) if len(ys) > 1 else 0.0, tuple(by_x[x]))
            for x in sorted(by_x) for ys in [[y_of(r) for r in by_x[x]]]]
