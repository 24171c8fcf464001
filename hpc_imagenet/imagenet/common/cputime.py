"""CPU seconds (user + system) of this process and everything it started, for time-to-accuracy's
core-seconds: the figure that other work sharing the cores hardly changes; and the whole machine's, to
tell how much of it other processes used while a measurement ran (:class:`OtherWork`).

The kernel's rusage counts this process and the children it has waited for; the data loader's
persistent workers are still running, so their time is read from ``/proc/<pid>/stat`` (their own
utime/stime plus their waited-for children's). Hand-written because the standard library has no
process-tree CPU time and psutil is not a dependency; it is one pass over /proc. Outside Linux the
live children are left out.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Dict, List, Optional, Tuple

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat's first line: user nice system idle iowait irq softirq steal (guest time is within user)
BUSY_FIELDS, IDLE_FIELDS = (0, 1, 2, 5, 6, 7), (3, 4)


def process_tree_cpu_s() -> float:
    """This process's CPU seconds plus its children's, ended or still running."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime + _live_descendants_cpu_s(os.getpid())


def tree_cpu_s(pid: int) -> float:
    """CPU seconds so far of process PID (alive) and all its descendants, ended or still running;
    0.0 when PID is gone."""
    stats = _all_stats()
    return stats[pid][1] + _live_descendants_cpu_s(pid, stats) if pid in stats else 0.0


def _live_descendants_cpu_s(root: int, stats: Optional[Dict[int, tuple]] = None) -> float:
    stats = _all_stats() if stats is None else stats
    children: Dict[int, List[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


def _all_stats() -> Dict[int, tuple]:
    """pid -> (parent pid, CPU seconds of it and its waited-for children) for every readable process."""
    out: Dict[int, tuple] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone since the listing, or not Linux
            continue
        # fields after the command name, which is in parentheses and may itself hold spaces
        fields = text[text.rindex(")") + 2:].split()
        ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime (stat fields 14-17)
        out[int(entry.name)] = (int(fields[1]), ticks / _TICKS)
    return out


def machine_cpu_s() -> Tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores, from /proc/stat."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    busy, idle = sum(ticks[i] for i in BUSY_FIELDS), sum(ticks[i] for i in IDLE_FIELDS)
    return busy / _TICKS, (busy + idle) / _TICKS


class OtherWork:
    """The share of the machine's CPU time that processes outside this one's tree (itself, its children,
    ended or running) used since the last :meth:`mark`: 0 on a quiet machine, whatever a measurement's own
    processes load it with. None where the machine's counters cannot be read, or over less than MIN_S seconds
    of the machine's CPU time (default 1: its counters tick every 10 ms, a stretch of a few ticks is noise)."""

    def __init__(self, min_s: float = 1.0) -> None:
        self.min_s = min_s
        self.mark()

    def mark(self) -> None:
        self._start = self._now()

    def share(self) -> Optional[float]:
        now, start = self._now(), self._start
        if now is None or start is None or now[1] - start[1] < self.min_s or now[1] <= start[1]:
            return None
        return max(0.0, (now[0] - start[0]) - (now[2] - start[2])) / (now[1] - start[1])

    @staticmethod
    def _now() -> Optional[Tuple[float, float, float]]:
        try:
            return (*machine_cpu_s(), process_tree_cpu_s())
        except (OSError, ValueError):  # not Linux
            return None
