"""A training program run as a child process and watched line by line: every printed line is
timestamped on arrival (wall seconds since the start) and handed to a parser, so the curve of a
program that prints no times of its own (pytorch/examples' main.py) is measured the same way as the
engine's. The run's CPU seconds (its whole process tree, once it has ended) and the machine's load
average while it ran come with the result.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from imagenet import cputime
from results.runners.common import BenchError
from results.runners.sampling import LoadSampler, children_cpu_s


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
    result.load = sampler.summary()
    return result
