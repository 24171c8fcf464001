"""A first-order model of data-parallel scaling: compute time per step plus gradient all-reduce.

Per step on n GPUs (batch b each, single-GPU step time t_c, gradient bytes G, in DDP buckets):

    t_comm(n) = k * 2(n-1) * alpha  +  2(n-1)/n * G / B        (ring all-reduce; 0 for n = 1)
    no overlap:  t(n) = t_c + t_comm(n)
    overlap:     t(n) = (1-f) t_c + max(f t_c, t_comm(n))       (comm hidden behind backward)
    throughput(n) = n b / t(n),  efficiency(n) = t_c / t(n)

with k = ceil(G / bucket) all-reduce calls, alpha the per-hop latency, B the bus bandwidth
(nccl-tests "busbw") of the slowest link the ring crosses: intra-node while n fits one node,
inter-node beyond, and f the backward share of the step. What it leaves out is said where it
is checked against measurements: data loading, stragglers, and compute that changes with n.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb default
BACKWARD_FRACTION = 2.0 / 3.0  # backward ~ twice the forward's FLOPs


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


def step_time(m: ModelInputs, n: int, overlap: bool) -> float:
    tc, tm = m.step_time_s, comm_time(m, n)
    if not overlap:
        return tc + tm
    f = m.backward_fraction
    return (1 - f) * tc + max(f * tc, tm)


def predict(m: ModelInputs, n: int, overlap: bool) -> Dict[str, float]:
    t = step_time(m, n, overlap)
    return {"gpus": n, "step_time_s": t, "comm_time_s": comm_time(m, n),
            "images_per_s": n * m.batch_per_gpu / t, "efficiency": m.step_time_s / t}


def table(m: ModelInputs, gpus: Sequence[int]) -> List[Dict[str, float]]:
    """One row per GPU count with both overlap assumptions."""
    rows = []
    for n in gpus:
        a, b = predict(m, n, overlap=False), predict(m, n, overlap=True)
        rows.append({"gpus": n, "comm_time_s": a["comm_time_s"],
                     "images_per_s_no_overlap": a["images_per_s"], "efficiency_no_overlap": a["efficiency"],
                     "images_per_s_overlap": b["images_per_s"], "efficiency_overlap": b["efficiency"]})
    return rows


def powers_of_two(lo: int = 1, hi: int = 1024) -> List[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def calibrate(m: ModelInputs, n: int, measured_step_s: float, overlap: bool) -> ModelInputs:
    """The single-GPU step time that makes the model reproduce a step time measured on n GPUs.

    For published tables with no 1-GPU row: t(n) grows monotonically with t_c, so bisection on
    t_c in (0, measured] finds it. Returns ``m`` with that step time.
    """
    lo, hi = 0.0, measured_step_s
    for _ in range(100):
        mid = (lo + hi) / 2
        if step_time(replace(m, step_time_s=mid), n, overlap) < measured_step_s:
            lo = mid
        else:
            hi = mid
    return replace(m, step_time_s=(lo + hi) / 2)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: positive when the model is optimistic."""
    return (predicted - measured) / measured
