"""What a long benchmark run shares with the rest of the machine: the load average sampled while it
runs, and the CPU time its finished child processes used.

Other work may share the cores, so wall time alone can mislead; the CPU seconds of the run's process
tree (user + system, from the kernel's accounting of waited-for children, which includes their own
waited-for children such as data-loading workers) hardly change with contention, and the load average
says how crowded the machine was.
"""
from __future__ import annotations

import os
import resource
import threading
from typing import List

SAMPLE_EVERY_S = 15.0


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class LoadSampler:
    """``with LoadSampler() as s:`` samples the 1-minute load average every SAMPLE_EVERY_S seconds."""

    def __init__(self, every_s: float = SAMPLE_EVERY_S) -> None:
        self.every_s = every_s
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])  # the load at the end, even for a short run

    def _sample(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def summary(self) -> dict:
        """Mean and max of the samples, with the core count they compare with."""
        return {"load_1m_mean": round(sum(self.samples) / len(self.samples), 2),
                "load_1m_max": round(max(self.samples), 2), "cores": os.cpu_count(),
                "samples": len(self.samples)}
