"""nccl-tests arithmetic on all-reduce records: the ring's bus factor and the latency/bandwidth fit
that the scaling model takes as its link."""
from __future__ import annotations

import statistics
from typing import Dict, Optional, Sequence

from hpc_imagenet.harness.core.kinds import AllreduceMetrics


def bus_factor(world_size: int) -> float:
    """2(n-1)/n: ring all-reduce traffic per link relative to the message size."""
    return 2.0 * (world_size - 1) / world_size


def fit_alpha_beta(rows: Sequence[AllreduceMetrics]) -> Optional[Dict[str, float]]:
    """Least-squares fit t = alpha + (2(n-1)/n) * S / busbw over rows of one world size.

    Returns latency alpha (s) and asymptotic bus bandwidth (bytes/s, 1/slope), the two numbers the
    scaling model needs; None when fewer than two sizes or a non-positive slope. The intercept of
    an unweighted fit is dominated by the large messages' noise, so alpha is the smallest
    message's time instead (the latency floor nccl-tests shows in its first rows).
    """
    if len(rows) < 2:
        return None
    n = rows[0].world_size
    try:
        slope = statistics.linear_regression([r.bytes * bus_factor(n) for r in rows],
                                             [r.time_us * 1e-6 for r in rows]).slope
    except statistics.StatisticsError:  # one message size: no slope
        return None
    if slope <= 0:
        return None
    smallest = min(rows, key=lambda r: r.bytes)
    return {"alpha_s": smallest.time_us * 1e-6, "busbw_bytes_per_s": 1.0 / slope, "world_size": n}


def hop_latency(allreduce_time_s: float, world_size: int) -> float:
    """Per-hop latency from a small all-reduce's time measured on ``world_size`` ranks."""
    return allreduce_time_s / (2 * (world_size - 1))
