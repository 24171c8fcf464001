"""Collect results from spawned helper processes without hanging on one that died silently."""
from __future__ import annotations

import queue as _queue
import time
from typing import Any, List, Sequence


def gather(q, procs: Sequence, expected: int, timeout_s: float) -> List[Any]:
    """``expected`` messages from ``q``; RuntimeError when a process exits early or time runs out."""
    got: List[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected:
        try:
            got.append(q.get(timeout=0.5))
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
