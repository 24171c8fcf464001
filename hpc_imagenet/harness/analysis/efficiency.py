"""Scaling efficiency: the one definition every section uses.

efficiency = (images/s per process) / (the same at the series' smallest process or GPU count), so a
sweep of 2..8 processes is judged from 2, not from an absent 1.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Sequence

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import group_by
from hpc_imagenet.harness.core.setups import group_key


def efficiency(count: float, rate: float, base_count: float, base_rate: float) -> float:
    """(rate / count) / (base_rate / base_count)."""
    return (rate / count) / (base_rate / base_count)


def efficiencies(counts: Sequence[float], rates: Sequence[float]) -> List[float]:
    """Each point's efficiency against the first (the series' smallest count)."""
    return [efficiency(n, x, counts[0], rates[0]) for n, x in zip(counts, rates)]


def with_efficiency(records: Sequence[Record]) -> List[Record]:
    """RECORDS with metrics.scaling_efficiency (and .baseline_world_size) set on each ok train record,
    against the smallest world size of the same sweep and same other parameters."""
    groups = group_by([r for r in records if r.kind == "train" and r.ok], lambda r: (r.sweep,) + group_key(r.point))
    done = {}
    for members in groups.values():
        base = min(members, key=lambda r: r.metrics.world_size).metrics
        for r in members:
            m = r.metrics
            e = efficiency(m.world_size, m.images_per_s, base.world_size, base.images_per_s)
            done[id(r)] = replace(r, metrics=replace(m, scaling_efficiency=e, baseline_world_size=base.world_size))
    return [done.get(id(r), r) for r in records]
