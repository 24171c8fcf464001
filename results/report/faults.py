"""RESULTS.md's fault-tolerance table, from the ``fault`` records of ``python -m results.bench faults``.

One row per fault (the newest sweep that measured it): how many times it was injected, how many
runs survived (finished after a restart from the last checkpoint), the time to detect it (fault
injected -> the job or process ended; median and maximum), the steps trained twice (the work since
the last checkpoint, trained again after the restart) and the checkpoints lost.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence

from results.report.common import md_table

HEADERS = ("fault", "launcher", "nodes", "injected", "survived", "detect median (s)", "detect max (s)",
           "steps trained twice", "checkpoints lost", "records")


def _newest_per_fault(recs: Sequence[dict]) -> Dict[str, List[dict]]:
    """fault -> the records of the newest sweep that injected it."""
    newest: Dict[str, str] = {}
    for r in sorted(recs, key=lambda r: r["time"]):
        newest[r["point"]["fault"]] = r["sweep"]
    return {f: [r for r in recs if r["point"]["fault"] == f and r["sweep"] == s] for f, s in newest.items()}


def _seconds(values: List[float], pick) -> Optional[float]:
    return round(pick(values), 1) if values else None


def rows(recs: Sequence[dict]) -> List[list]:
    out = []
    for fault, group in _newest_per_fault([r for r in recs if r["status"] == "ok"]).items():
        detect = [r["metrics"]["detect_s"] for r in group if r["metrics"].get("detect_s") is not None]
        first = group[0]["point"]
        out.append([fault, first.get("launcher"), first.get("nodes"), len(group),
                    sum(r["metrics"]["survived"] for r in group), _seconds(detect, statistics.median),
                    _seconds(detect, max), sum(r["metrics"]["steps_trained_twice"] for r in group),
                    sum(r["metrics"]["checkpoints_lost"] for r in group),
                    ", ".join(r.get("_source", "?") for r in group)])
    return out


def section(recs: Sequence[dict]) -> str:
    """The markdown section ("" when no fault was recorded)."""
    faults = [r for r in recs if r["kind"] == "fault"]
    if not faults:
        return ""
    failed = [r for r in faults if r["status"] != "ok"]
    text = ("## Fault tolerance\n\nFaults injected into tiny real jobs on the SLURM test cluster by "
            "`python -m results.bench faults` (the chaos tests of `tests/cluster/test_slurm_faults.py`). Time to detect: "
            "fault injected -> the job (or process) ended; '-' where the fault is reported synchronously. "
            "Steps trained twice: the work since the last checkpoint, trained again after the restart.\n\n"
            + md_table(HEADERS, rows(faults)))
    if failed:
        text += f"\n{len(failed)} fault run(s) failed: " + "; ".join(
            f"{r['point']['fault']}: {r['error']}" for r in failed) + "\n"
    return text
