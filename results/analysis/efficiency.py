"""Scaling efficiency: the one definition every section uses.

efficiency = (images/s per process) / (the same at the series' smallest process or GPU count), so a
sweep of 2..8 processes is judged from 2, not from an absent 1.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from results.core.setups import group_key


def efficiency(count: float, rate: float, base_count: float, base_rate: float) -> float:
    """(rate / count) / (base_rate / base_count)."""
    return (rate / count) / (base_rate / base_count)


def efficiencies(counts: Sequence[float], rates: Sequence[float]) -> List[float]:
    """Each point's efficiency against the first (the series' smallest count)."""
    return [efficiency(n, x, counts[0], rates[0]) for n, x in zip(counts, rates)]


def add_efficiency(records: List[dict]) -> None:
    """Set metrics.scaling_efficiency (and .baseline_world_size) of ok train records in place, against the
    smallest world size of the same sweep and same other parameters."""
    ok = [r for r in records if r["kind"] == "train" and r["status"] == "ok"]
    groups: Dict[Tuple, List[dict]] = {}
    for r in ok:
        groups.setdefault((r["sweep"],) + group_key(r["point"]), []).append(r)
    for members in groups.values():
        base = min(members, key=lambda r: r["metrics"]["world_size"])["metrics"]
        for r in members:
            m = r["metrics"]
            m["scaling_efficiency"] = efficiency(m["world_size"], m["images_per_s"], base["world_size"],
                                                 base["images_per_s"])
            m["baseline_world_size"] = base["world_size"]
