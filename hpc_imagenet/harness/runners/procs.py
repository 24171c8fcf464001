"""Spawned helper processes: local process groups, and results collected without hanging on one
that died silently."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as _queue
import time
from typing import Any, Callable, Iterator, List, Sequence

from hpc_imagenet.launch.ports import free_port


def spawn(target: Callable, per_process: Sequence[tuple], expected: int, timeout_s: float) -> List[Any]:
    """EXPECTED messages that fresh processes, TARGET(*args, queue) for each ARGS of PER_PROCESS, put
    on their queue (spawned: a fork after torch's threads started is unsafe). RuntimeError when a
    process exits early or time runs out; every process is reaped (killed after a grace time) either way."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, queue)) for args in per_process]
    for p in procs:
        p.start()
    got: List[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
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
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()


@contextlib.contextmanager
def torch_threads(threads: int = 1) -> Iterator[None]:
    """Torch's intra-op thread count set to THREADS meanwhile (per core means one core)."""
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _rank_main(rank: int, world: int, port: int, backend: str, fn: Callable, args: tuple, queue) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: ranks share the cores
    import torch.distributed as dist

    try:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        result = fn(*args)
        if rank == 0:
            queue.put({"result": result})
    except BaseException as e:
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"})
    # No destroy_process_group: in torch 2.6 it can deadlock (gloo's destructor joins a worker thread that
    # waits for the GIL to free the last collective's tensor). The helper ends once its message is sent;
    # the system closes its sockets.
    queue.close()
    queue.join_thread()
    os._exit(0)


def run_ranks(world_size: int, fn: Callable, args: tuple, backend: str = "gloo", timeout_s: float = 900) -> Any:
    """Rank 0's return value of FN(*ARGS) run in a fresh WORLD_SIZE-process group on this host.

    FN must be a module-level function (the ranks are spawned). RuntimeError with the first failing
    rank's error, or when a rank dies without a word.
    """
    port = free_port("127.0.0.1")
    msg = spawn(_rank_main, [(r, world_size, port, backend, fn, args) for r in range(world_size)], 1, timeout_s)[0]
    if "error" in msg:
        raise RuntimeError(msg["error"])
    return msg["result"]
