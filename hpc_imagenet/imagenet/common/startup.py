"""Where a run's time before its first training step goes: the moments a process reaches each stage of its
start (imports, settings, the process group, the data, the model, the first batch, the first step), as
seconds since the process started, kept in run.json (``startup``).

The clock starts at the process's own start as the kernel recorded it (``/proc/self/stat``), so the
interpreter's start and the imports before any of this code ran are counted too; elsewhere it starts
when this module is imported. One timeline per process: the marks come from several modules of the run,
in order, and only the first mark of each name counts (a resumed loop does not move the first step).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

_IMPORTED = time.time()


def _process_start(stat: Path = Path("/proc/self/stat"), uptime: Path = Path("/proc/uptime")) -> float:
    """This process's start as a Unix time: now less its age, the machine's uptime less the process's start in
    clock ticks since boot (field 22 of its stat line, counted after the command name, which may hold spaces).
    Both are on the clock since boot; /proc/stat's boot time is whole seconds, too coarse for this."""
    try:
        now = time.time()
        ticks = int(stat.read_text().rsplit(")", 1)[1].split()[19])
        since_boot = float(uptime.read_text().split()[0])
        return now - max(since_boot - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


class Timeline:
    """The marks of one process's start, in the order they came."""

    def __init__(self, started: Optional[float] = None) -> None:
        self.started = _process_start() if started is None else started
        self.marks: List[Tuple[str, float]] = []

    def mark(self, stage: str, now: Optional[float] = None) -> None:
        """STAGE is over now (the first mark of a name counts)."""
        if all(name != stage for name, _ in self.marks):
            self.marks.append((stage, time.time() if now is None else now))

    def breakdown(self) -> Dict[str, object]:
        """Each stage's seconds (from the mark before it, the first from the process's start), in order (a list:
        records sort their keys), and the total."""
        stages, before = [], self.started
        for name, when in self.marks:
            stages.append({"stage": name, "s": round(max(when - before, 0.0), 3)})
            before = when
        return {"stages": stages, "total_s": round(max(before - self.started, 0.0), 3)}


TIMELINE = Timeline()


def mark(stage: str) -> None:
    TIMELINE.mark(stage)


def breakdown() -> Dict[str, object]:
    return TIMELINE.breakdown()
