"""All-reduce bandwidth of a torch.distributed backend, reported as nccl-tests does.

For a message of S bytes taking t seconds: algbw = S / t, and busbw = algbw * 2(n-1)/n, the
bandwidth each link must carry in a ring all-reduce, so busbw is comparable across process counts
and with the link's rated speed. One process per rank on this host (spawned, TCP rendezvous on
127.0.0.1).
"""
from __future__ import annotations

import logging
import time
from typing import Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

from hpc_imagenet.harness.analysis.allreduce_fit import bus_factor

log = logging.getLogger(__name__)


def sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> List[int]:
    """Message sizes in bytes, geometric like nccl-tests ``-b -e -f``; multiples of 4 (float32)."""
    out, s = [], max(4, min_bytes)
    while s <= max_bytes:
        out.append(s - s % 4)
        s *= factor
    return out


def iterations(nbytes: int, budget_bytes: int = 1 << 28, lo: int = 5, hi: int = 50) -> int:
    """More repetitions for small messages, fewer for large ones: bounded total traffic."""
    return max(lo, min(hi, budget_bytes // max(nbytes, 1)))


def time_allreduce(nbytes: int, iters: int, warmup: int, device: torch.device) -> float:
    """Mean seconds per all-reduce on this rank, the slowest rank's value (synchronised)."""
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(x)
    _sync(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    _sync(device)
    return slowest((time.perf_counter() - t0) / iters, device)


def slowest(value: float, device: Optional[torch.device] = None) -> float:
    """The largest of every rank's VALUE (a tensor on DEVICE for the all-reduce; default the CPU)."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sweep_in_group(message_sizes: Sequence[int], warmup: int = 3) -> List[Dict[str, float]]:
    """Run every size in the current process group (procs.run_ranks spawns one); rows for rank 0 to record."""
    n = dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")
    rows = []
    for nbytes in message_sizes:
        iters = iterations(nbytes)
        t = time_allreduce(nbytes, iters, warmup, device)
        algbw = nbytes / t / 1e9
        rows.append({"bytes": nbytes, "time_us": t * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * bus_factor(n), "iters": iters, "world_size": n})
        if dist.get_rank() == 0:
            log.info("allreduce n=%d %10d B  %9.1f us  busbw %.3f GB/s", n, nbytes, t * 1e6,
                     rows[-1]["busbw_gbps"])
    return rows


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
