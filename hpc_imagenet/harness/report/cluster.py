"""One tag's report: ``results/reports/<tag>/README.md`` and its figures, from that tag's records alone.

    python -m hpc_imagenet.harness.report --tag mycluster      # results/records/mycluster.jsonl ->
    results/reports/mycluster/

What a user publishes about their cluster, laid out as the seed's report: a summary paragraph, then the
sections of the declared record kinds (hpc_imagenet.harness.core.registry: each kind names the section that draws it, in
its own module: training, the step against the baseline, the GPU profile, learning curves, storage, the
loader, the decoding backends, all-reduce, shards, faults), then records of kinds no section draws, failed
points and the environments. Each figure is followed by its
table; only the figures the records support are drawn. Output is deterministic (no timestamps).
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.analysis.efficiency import with_efficiency
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import QUIET_SHARE, Record
from hpc_imagenet.harness.core.records import by_kind, group_by
from hpc_imagenet.harness.core.registry import drawn, sections
from hpc_imagenet.harness.report.common import Environments, Page, ReportError, fmt, md_table, pct, prose
from hpc_imagenet.harness.report.training import efficiency, hardware, main_series, train_series

log = logging.getLogger(__name__)


def _unit(hw: str) -> str:
    return "process(es)" if hw.startswith("CPU") else "GPU(s)"


def headline(recs: Sequence[Record], series, quiet_share: float = QUIET_SHARE) -> Dict[str, object]:
    """What the summary paragraph (and RESULTS.md's table of tags) says about one tag."""
    ok = [r for r in recs if r.status == "ok"]
    out: Dict[str, object] = {
        "records": len(recs), "ok": len(ok), "kinds": sorted({r.kind for r in ok}),
        "uncounted": sum(not r.counted(quiet_share) for r in recs),
        "hardware": " / ".join(sorted({hardware(r) for r in ok})) or "unknown hardware",
        "nodes": max((r.nodes for r in ok), default=1),
        "cores": "/".join(sorted({str(r.environment.cpu_count) for r in ok if r.environment.cpu_count})),
        "best": None, "efficiency": None,
        "notes": sorted({r.note for r in ok if r.note})}
    best = max(((k, p) for k, pts in series.items() for p in pts), key=lambda kp: kp[1].mean, default=None)
    if best:
        (hw, name), p = best
        out["best"] = (f"{fmt(p.mean)} images/s", f"{name}, {int(p.x)} {_unit(hw)}" + (f", mean of {p.n}" if p.n > 1
                                                                                        else ""), p.sources)
    main = main_series(series)
    if main:
        (hw, name), pts = main
        out["efficiency"] = (pct(efficiency(pts)[-1]), f"{int(pts[-1].x)} {_unit(hw)} vs {int(pts[0].x)}", name)
    return out


def summary(tag: str, headline: Dict[str, object]) -> str:
    """The summary paragraph: what was measured, then each of the headline's facts that the records give."""
    h, notes = headline, headline["notes"]
    parts = [prose("cluster.summary", tag=tag, h=h, kinds=", ".join(h["kinds"]) or "no",
                   cores=f" ({h['cores']} CPU cores per node)" if h["cores"] else ""),
             h["best"] and prose("cluster.summary_best", best=h["best"]),
             h["efficiency"] and prose("cluster.summary_efficiency", efficiency=h["efficiency"]),
             notes and prose("cluster.summary_notes" if len(notes) <= 3 else "cluster.summary_many_notes",
                             notes=" / ".join(notes), n=len(notes))]
    return " ".join(part for part in parts if part) + "\n"


OTHER_COLUMNS = ("kind", "point", "metrics", "record")


def other_section(recs: Sequence[Record]) -> str:
    """Records of kinds no section draws: their points and numeric metrics, as recorded."""
    rows = [[r.kind, _as_recorded(r.recorded("point"), lambda v: v not in (None, [], "")),
             _as_recorded(r.recorded("metrics"), lambda v: isinstance(v, (int, float))), r.source]
            for r in recs if r.ok and r.kind not in drawn()]
    return prose("cluster.other", table=md_table(OTHER_COLUMNS, rows)) if rows else ""


def _as_recorded(values: Dict[str, object], shown) -> str:
    return ", ".join(f"{k}={fmt(v)}" for k, v in sorted(values.items()) if shown(v))


UNCOUNTED_COLUMNS = ("kind", "point", "why", "host load (1 min)", "record")


def uncounted_section(recs: Sequence[Record], quiet_share: float) -> str:
    """Points taken while other processes crowded the machine: kept, listed here, left out of every figure."""
    rows = [[r.kind, _as_recorded(r.recorded("point"), lambda v: v not in (None, [], "")),
             r.not_counted or f"other processes used {pct(r.other_cpu_share)} of the CPU", r.host_load_1m, r.source]
            for r in recs if not r.counted(quiet_share)]
    return prose("cluster.uncounted", share=pct(quiet_share), table=md_table(UNCOUNTED_COLUMNS, rows)) \
        if rows else ""


FAILED_COLUMNS = ("kind", "sweep", "why (last line)", "record")
UNUSABLE_COLUMNS = ("line", "problem")


def failed_section(recs: Sequence[Record], problems: Sequence[records.Problem]) -> str:
    """Failed points with the last line of why, and the records file's lines that could not be used."""
    failed = [[r.kind, r.sweep, (r.error or "").splitlines()[-1][:160] if r.error else "-",
               r.source] for r in recs if r.status != "ok"]
    bad = [[p.line, p.reason] for p in problems]
    return prose("cluster.failed", table=md_table(FAILED_COLUMNS, failed),
                 bad=md_table(UNUSABLE_COLUMNS, bad)) if failed or bad else ""


ENV_KEYS = ("cpu_model", "cpu_count", "gpu_name", "gpu_count", "torch", "torchvision", "cuda", "nccl", "python")


def environments(recs: Sequence[Record], env: Environments) -> str:
    """The distinct software and hardware (hosts, jobs and commits vary per record and are not repeated); then
    the environments that rows name by id (ENV), where any does."""
    envs = group_by(recs, lambda r: tuple(str(getattr(r.environment, k)) for k in ENV_KEYS))
    rows = [[*(fmt(getattr(rs[0].environment, k)) for k in ENV_KEYS), len(rs),
             ", ".join(sorted({str(r.environment.git_commit)[:12] for r in rs}))] for rs in envs.values()]
    notes = sorted({r.note for r in recs if r.note})
    return ("## Environment\n\n" + md_table([*ENV_KEYS, "records", "commits"], rows)
            + ("\nNotes recorded with the points:\n\n" + "".join(f"- {n}\n" for n in notes) if notes else "")
            + ("\nThe environments that rows name by id:\n\n" + env.table() if env.ids else ""))


# ---------------------------------------------------------------- the report

def section_of(name: str):
    """The section function a kind's declaration names (``"module:function"``, hpc_imagenet.harness.core.registry)."""
    module, _, function = name.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
        raise ReportError(f"the report section {name!r} of a declared record kind cannot be loaded ({e}); fix "
                          "the kind's section= in its declaration") from None


def build_tag(tag: str, records_file: Path, out_dir: Path, loaded: Optional[Tuple[List[dict], List]] = None,
              quiet_share: float = QUIET_SHARE) -> Tuple[Path, Dict[str, object]]:
    """Write ``out_dir/README.md`` and its figures from one records file (LOADED: its records and unusable
    lines, where the caller has read it already); returns the README's path and the headline (hardware,
    best throughput, efficiency at the largest scale)."""
    every, problems = loaded if loaded is not None else records.load_typed([records_file])
    recs = with_efficiency([r for r in every if r.counted(quiet_share)])  # a crowded machine's: listed, not drawn
    env = Environments()
    page = Page(env, out_dir)
    body = [*(section_of(name)(recs, page) for name in sections()), other_section(recs),
            uncounted_section(every, quiet_share), failed_section(recs, problems)]
    top = headline(every, train_series(by_kind(recs, "train")), quiet_share)
    head = prose("cluster.head", tag=tag, file=records_file.name, unusable=len(problems), summary=summary(tag, top))
    text = "\n".join([head, *[b for b in body if b], environments(recs, env)])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "README.md"
    write_text(path, text)
    log.info("wrote %s", path)
    return path, top
