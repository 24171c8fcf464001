"""A first-order model of data-parallel scaling: compute time per step plus gradient all-reduce.

Per step on n GPUs (batch b each, single-GPU step time t_c, gradient bytes G, in DDP buckets):

    t_comm(n) = k * 2(n-1) * alpha  +  2(n-1)/n * G / B        (ring all-reduce; 0 for n = 1)
    hidden(n) = min(h * t_comm(n), f * t_c)                     (what backward hides)
    t(n)      = t_c + max(0, t_comm(n) - hidden(n))            (exposed communication added)
    throughput(n) = n b / t(n),  efficiency(n) = t_c / t(n)

with k = ceil(G / bucket) all-reduce calls, alpha the per-hop latency, B the bus bandwidth
(nccl-tests "busbw") of the slowest link the ring crosses: intra-node while n fits one node,
inter-node beyond, f the backward share of the step, and h the *hidden fraction*: the share of
the all-reduce that runs while backward still computes.

h is an input, not a fit:

- h = 0 (``NO_OVERLAP``): every byte is exposed, t(n) = t_c + t_comm(n). The conservative
  assumption, and the default when nothing was measured.
- h = 1 (``FULL_OVERLAP``): ideal overlap, t(n) = (1-f) t_c + max(f t_c, t_comm(n)); only the
  part of t_comm longer than backward is exposed (communication cannot start before backward).
- measured h: ``hidden_fraction`` of an overlap record (results/overlap_bench.py), i.e.
  1 - exposed / (all-reduce alone) for one model, bucket size and world size. Using it at every
  n assumes that the same share of the all-reduce hides whatever the link and the GPU count; the
  cap f t_c still applies, so a slow link is never hidden by a short backward. The benchmark
  clamps h at 0: when contention makes the exposed time exceed the all-reduce alone (CPU ranks
  sharing cores), the model does not see that slowdown.

What it leaves out is said where it is checked against measurements: data loading, stragglers,
and compute that changes with n.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb default
BACKWARD_FRACTION = 2.0 / 3.0  # backward ~ twice the forward's FLOPs
NO_OVERLAP = 0.0  # hidden fraction h: nothing hidden (the default without an overlap record)
FULL_OVERLAP = 1.0  # all of the all-reduce hides, up to the backward time


@dataclass(frozen=True)
class ModelInputs:
    """Everything the prediction depends on; bandwidths in bytes/s, times in seconds."""

    step_time_s: float
    batch_per_gpu: int
    grad_bytes: float
    busbw_intra: float
    alpha_intra_s: float = 0.0
    gpus_per_node: int = 1 << 30  # one node unless said otherwise
    busbw_inter: Optional[float] = None
    alpha_inter_s: Optional[float] = None
    bucket_bytes: float = DDP_BUCKET_BYTES
    backward_fraction: float = BACKWARD_FRACTION


def hidden_fraction(exposed_s: float, allreduce_alone_s: float) -> float:
    """h from an overlap measurement: 1 - exposed / alone, clamped to [0, 1] (results/overlap_bench.py)."""
    if allreduce_alone_s <= 0:
        raise ValueError(f"all-reduce time {allreduce_alone_s!r} must be positive")
    return min(max(1.0 - exposed_s / allreduce_alone_s, 0.0), 1.0)


def hop_latency(allreduce_time_s: float, world_size: int) -> float:
    """Per-hop latency from a small all-reduce's time measured on ``world_size`` ranks."""
    return allreduce_time_s / (2 * (world_size - 1))


def comm_time(m: ModelInputs, n: int) -> float:
    """Seconds per step spent all-reducing gradients on n GPUs."""
    if n <= 1:
        return 0.0
    inter = n > m.gpus_per_node and m.busbw_inter is not None
    bw = m.busbw_inter if inter else m.busbw_intra
    alpha = (m.alpha_inter_s if m.alpha_inter_s is not None else m.alpha_intra_s) if inter else m.alpha_intra_s
    calls = math.ceil(m.grad_bytes / m.bucket_bytes)
    return calls * 2 * (n - 1) * alpha + 2 * (n - 1) / n * m.grad_bytes / bw


def hidden_time(m: ModelInputs, n: int, hidden_fraction: float) -> float:
    """Seconds of the all-reduce that backward hides: h t_comm(n), at most the backward time f t_c."""
    if not 0.0 <= hidden_fraction <= 1.0:
        raise ValueError(f"hidden fraction {hidden_fraction!r} is not in [0, 1]")
    return min(hidden_fraction * comm_time(m, n), m.backward_fraction * m.step_time_s)


def step_time(m: ModelInputs, n: int, hidden_fraction: float) -> float:
    """Seconds per step: compute plus the exposed part of the all-reduce (see the module docstring)."""
    return m.step_time_s + max(0.0, comm_time(m, n) - hidden_time(m, n, hidden_fraction))


def predict(m: ModelInputs, n: int, hidden_fraction: float) -> Dict[str, float]:
    t = step_time(m, n, hidden_fraction)
    return {"gpus": n, "step_time_s": t, "comm_time_s": comm_time(m, n), "exposed_comm_s": t - m.step_time_s,
            "images_per_s": n * m.batch_per_gpu / t, "efficiency": m.step_time_s / t}


def table(m: ModelInputs, gpus: Sequence[int], hidden_fraction: float = NO_OVERLAP) -> List[Dict[str, float]]:
    """One row per GPU count: no overlap, the given hidden fraction, and full overlap."""
    rows = []
    for n in gpus:
        row = {"gpus": n, "comm_time_s": comm_time(m, n)}
        for name, h in (("no_overlap", NO_OVERLAP), ("measured", hidden_fraction), ("overlap", FULL_OVERLAP)):
            p = predict(m, n, h)
            row[f"images_per_s_{name}"], row[f"efficiency_{name}"] = p["images_per_s"], p["efficiency"]
        rows.append(row)
    return rows


def powers_of_two(lo: int = 1, hi: int = 1024) -> List[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def calibrate(m: ModelInputs, n: int, measured_step_s: float, hidden_fraction: float) -> ModelInputs:
    """The single-GPU step time that makes the model reproduce a step time measured on n GPUs.

    For published tables with no 1-GPU row: t(n) grows monotonically with t_c, so bisection on
    t_c in (0, measured] finds it. Returns ``m`` with that step time.
    """
    lo, hi = 0.0, measured_step_s
    for _ in range(100):
        mid = (lo + hi) / 2
        if step_time(replace(m, step_time_s=mid), n, hidden_fraction) < measured_step_s:
            lo = mid
        else:
            hi = mid
    return replace(m, step_time_s=(lo + hi) / 2)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: positive when the model is optimistic."""
    return (predicted - measured) / measured
