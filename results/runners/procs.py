"""Spawned helper processes: local process groups, and results collected without hanging on one
that died silently."""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as _queue
import time
from typing import Any, Callable, List, Sequence

from launch.environment import free_port


def gather(queue, procs: Sequence, expected: int, timeout_s: float) -> List[Any]:
    """``expected`` messages from ``queue``; RuntimeError when a process exits early or time runs out."""
    got: List[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected:
        try:
            got.append(queue.get(timeout=0.5))
            continue
        except _queue.Empty:
            pass
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"helper process {dead[0].name} exited with code {dead[0].exitcode} "
                               "before reporting (see its output above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no result from helper processes after {timeout_s:.0f} s")
    return got


def reap(procs: Sequence, grace_s: float = 30) -> None:
    for p in procs:
        p.join(timeout=grace_s)
        if p.is_alive():
            p.kill()
            p.join()


def _rank_main(rank: int, world: int, port: int, backend: str, fn: Callable, args: tuple, queue) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: ranks share the cores
    import torch.distributed as dist

    try:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        try:
            result = fn(*args)
        finally:
            dist.destroy_process_group()
        if rank == 0:
            queue.put({"result": result})
    except BaseException as e:
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})


def run_ranks(world_size: int, fn: Callable, args: tuple, backend: str = "gloo", timeout_s: float = 900) -> Any:
    """Rank 0's return value of FN(*ARGS) run in a fresh WORLD_SIZE-process group on this host.

    FN must be a module-level function (the ranks are spawned). RuntimeError with the first failing
    rank's error, or when a rank dies without a word.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port("127.0.0.1")
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, port, backend, fn, args, queue))
             for r in range(world_size)]
    for p in procs:
        p.start()
    try:
        msg = gather(queue, procs, 1, timeout_s)[0]
    finally:
        reap(procs)
    if "error" in msg:
        raise RuntimeError(msg["error"])
    return msg["result"]
