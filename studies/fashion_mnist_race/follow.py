"""A training program run as a child process and watched line by line: every printed line is
timestamped on arrival (wall seconds since the start) and handed to a parser, so the curve of a
program that prints no times of its own (pytorch/examples' main.py) is measured the same way as the
engine's. The run's CPU seconds (its whole process tree, once it has ended) and the machine's load
average while it ran come with the result: other work may share the cores, so wall time alone can
mislead; CPU seconds hardly change with contention, and the load average says how crowded the
machine was.

How much else ran is measured, not guessed from the load average (a program's own loader workers
load 2 cores past 4): ``other_cpu_share`` is the machine's busy CPU time over the run (``/proc/stat``,
all cores) less the run's own process tree and this harness's process, as a share of the machine's
CPU time (wall seconds x cores): :class:`hpc_imagenet.imagenet.common.cputime.OtherWork`, the harness's own measure.
A benchmark counts a run only when it is at most ``QUIET_SHARE``.
"""
from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.harness.core import kinds
from hpc_imagenet.harness.runners.common import BenchError

SAMPLE_EVERY_S = 15.0
PROGRESS_EVERY_S = 60.0  # a watched program's progress lines are logged at most this often
QUIET_SHARE = kinds.QUIET_SHARE  # a run counts when other processes used at most this share of the machine's CPU


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's children that have ended and been waited for
    (their own waited-for children, such as data-loading workers, included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class LoadSampler:
    """``with LoadSampler() as s:`` samples the 1-minute load average every SAMPLE_EVERY_S seconds."""

    def __init__(self) -> None:
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
            if self._stop.wait(SAMPLE_EVERY_S):
                return

    def summary(self) -> dict:
        """Mean and max of the samples, with the core count they compare with."""
        return {"load_1m_mean": round(sum(self.samples) / len(self.samples), 2),
                "load_1m_max": round(max(self.samples), 2), "cores": os.cpu_count(),
                "samples": len(self.samples)}


@dataclass(frozen=True)
class Moment:
    """When a line arrived: wall seconds since the start, and a way to read the run's CPU seconds
    so far (its process tree; a pass over /proc, so read only at the lines that need it)."""

    wall_s: float
    pid: int

    def cpu_s(self) -> float:
        return cputime.tree_cpu_s(self.pid)


@dataclass
class Followed:
    """What a followed run cost and how it ended."""

    wall_s: float = 0.0
    core_s: float = 0.0
    returncode: int = 0
    load: dict = field(default_factory=dict)
    tail: List[str] = field(default_factory=list)  # its last lines, for the error of a failed run


def follow(cmd: Sequence[str], cwd: Path, log_file: Path, on_line: Callable[[Moment, str], None],
           timeout_s: Optional[float] = None) -> Followed:
    """Run CMD in CWD; each line goes to LOG_FILE (prefixed with its time) and to ON_LINE(moment, line).
    BenchError when it runs past TIMEOUT_S (it is killed)."""
    result = Followed()
    cpu0 = children_cpu_s()
    start = time.monotonic()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    other = cputime.OtherWork(min_s=0.0)  # the machine's busy time less this process, the run, their children
    with open(log_file, "w", encoding="utf-8") as out, LoadSampler() as sampler:
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)
        try:
            for line in proc.stdout:
                now = time.monotonic() - start
                out.write(f"{now:9.2f} {line}")
                out.flush()
                result.tail = (result.tail + [line.rstrip()])[-20:]
                on_line(Moment(now, proc.pid), line)
                if timeout_s and now > timeout_s:
                    name = next((Path(c).name for c in cmd if str(c).endswith(".py")), Path(cmd[0]).name)
                    raise BenchError(f"{name} ran past {timeout_s:.0f} s and was stopped; see {log_file}")
        finally:
            if proc.poll() is None:
                proc.kill()
            result.returncode = proc.wait()
    result.wall_s = time.monotonic() - start
    result.core_s = children_cpu_s() - cpu0
    share = other.share()
    result.load = {**sampler.summary(), "other_cpu_share": None if share is None else round(share, 4)}
    return result
