"""Scaling efficiency of train records against the smallest world size of their series."""
from __future__ import annotations

from typing import Dict, List, Tuple

from results.core.setups import group_key


def add_efficiency(records: List[dict]) -> None:
    """Set metrics.scaling_efficiency (and .baseline_world_size) in place.

    Efficiency = (X_n / n) / (X_0 / n_0) against the smallest world size of the same sweep and
    same other parameters, so a sweep of 2..8 processes is judged from 2, not from an absent 1.
    """
    ok = [r for r in records if r["kind"] == "train" and r["status"] == "ok"]
    groups: Dict[Tuple, List[dict]] = {}
    for r in ok:
        groups.setdefault((r["sweep"],) + group_key(r["point"]), []).append(r)
    for members in groups.values():
        base = min(members, key=lambda r: r["metrics"]["world_size"])
        b_rate = base["metrics"]["images_per_s"] / base["metrics"]["world_size"]
        for r in members:
            m = r["metrics"]
            m["scaling_efficiency"] = m["images_per_s"] / m["world_size"] / b_rate
            m["baseline_world_size"] = base["metrics"]["world_size"]
