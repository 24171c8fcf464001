"""A tag's fault-tolerance table, from the ``fault`` records of ``python -m hpc_imagenet.harness.bench faults``.

One row per fault and launcher of the newest sweep (the bench runs every scenario in one sweep; older
sweeps, whose scenarios or behaviour may since have changed, stay in the records file only): how
many times it was injected;
whether training went on without a user (an in-job restart or SLURM's own requeue: "yes" for every
injection, "no" for none, else how many); the time to detect it (fault injected -> the failure
reported) and to training again (fault injected -> the first progress line after the resume:
restarts, requeue holds and start-up included), medians and maxima; the work lost (steps trained
twice, i.e. since the newest checkpoint, and their seconds at the step times the first run
printed: the maximum over the injections); the checkpoints lost. Records from before the recovery
columns existed show '-' there.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import group_by
from hpc_imagenet.harness.report.common import Page, md_table, prose


def _newest_sweep(recs: Sequence[Record]) -> Dict[Tuple[str, str], List[dict]]:
    """(fault, launcher) -> its records in the newest sweep, in the order they were measured."""
    if not recs:
        return {}
    newest = sorted(recs, key=lambda r: r.time)[-1].sweep  # the last written on a tie
    return group_by(sorted((r for r in recs if r.sweep == newest), key=lambda r: r.time),
                    lambda r: (r.point.fault, r.point.launcher))


def _seconds(values: List[float], pick) -> Optional[float]:
    return round(pick(values), 1) if values else None


def _metric(group: Sequence[Record], name: str) -> List[float]:
    return [getattr(r.metrics, name) for r in group if getattr(r.metrics, name) is not None]


def _recovered(group: Sequence[Record]) -> Optional[str]:
    flags = _metric(group, "recovered")
    if not flags:
        return None
    return "yes" if all(flags) else "no" if not any(flags) else f"{sum(flags)} of {len(flags)}"


def rows(recs: Sequence[Record]) -> List[list]:
    out = []
    for (fault, launcher), group in _newest_sweep([r for r in recs if r.status == "ok"]).items():
        detect, again = _metric(group, "detect_s"), _metric(group, "recover_s")
        twice, lost_s = _metric(group, "steps_trained_twice"), _metric(group, "seconds_lost")
        out.append([fault, launcher, group[0].point.nodes, len(group), _recovered(group),
                    _seconds(detect, statistics.median), _seconds(detect, max), _seconds(again, statistics.median),
                    _seconds(again, max), max(twice) if twice else None, _seconds(lost_s, max),
                    sum(r.metrics.checkpoints_lost for r in group),
                    ", ".join(r.source or "?" for r in group)])
    return out


COLUMNS = ("fault", "launcher", "nodes", "injected", "recovered without a user", "detect median (s)", "detect max (s)",
           "to training again median (s)", "to training again max (s)", "steps lost (max)", "seconds lost (max)",
           "checkpoints lost", "records")


def section(recs: Sequence[Record]) -> str:
    """The markdown section ("" when no fault was recorded)."""
    faults = [r for r in recs if r.kind == "fault"]
    if not faults:
        return ""
    failed = [r for r in faults if r.status != "ok"]
    text = prose("faults.section", table=md_table(COLUMNS, rows(faults)))
    if failed:
        text += f"\n{len(failed)} fault run(s) failed: " + "; ".join(
            f"{r.point.fault}: {r.error}" for r in failed) + "\n"
    return text


def draw(recs: Sequence[Record], page: Page) -> str:
    return section(recs)
