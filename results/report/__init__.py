"""Records + TensorBoard events -> ``results/figures/*.png`` and ``results/RESULTS.md``.

    python -m results.report                      # all of results/records/*.jsonl, and a report per tag
    python -m results.report --tag T              # results/records/T.jsonl alone -> results/reports/T/
    python -m results.report --records FILE.jsonl --out DIR

RESULTS.md opens with the targets (goal, best measured, met, record) and a table of the clusters,
each linked to its own report (``reports/<tag>/README.md``, :mod:`results.report.cluster`: one per
records file), then one section per question; tables longer than a screen fold into a
``<details>`` block under their figure.

Every number in the report comes from a record, a run's TensorBoard events, or the published
reference data in ``results/reference/`` (with its source); each figure is followed by the table
it was drawn from, and each row names its record's environment. Records that cannot be used are
listed, not dropped. Output is deterministic (no timestamps), so regenerating the committed
report from the committed records changes nothing.

One module per report section (``common`` holds what they share); this module assembles them.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from imagenet.common.files import write_text
from results.analysis.efficiency import with_efficiency
from results.core import records
from results.core.kinds import Record
from results.core.records import by_kind
from results.report.comm import allreduce_section, overlap_section
from results.report.common import (REFERENCE, REPO, RESULTS, Environments, ReportError, fmt, load_reference, md_table,
                                   pct, prose)
from results.report import (amp_parity, cluster, data_scale, faults, gpu_step, prepare, targets, time_to_accuracy,
                            whole_step)
from results.report.curves import curves_section
from results.report.data_io import io_section
from results.report.model import hal_model, model_section
from results.report.pipeline import pipeline_section
from results.report.steps import step_section
from results.report.storage import storage_section
from results.report.training import multinode_section, throughput_section, time_section

__all__ = ["build", "main", "ReportError", "Environments", "fmt", "pct", "load_reference", "hal_model",
           "model_section"]

log = logging.getLogger(__name__)


def problems_section(recs: Sequence[Record], problems: Sequence[records.Problem], env: Environments) -> str:
    failed = [[r.kind, json.dumps(r.recorded("point"), sort_keys=True), r.error, env.id(r), r.source]
              for r in recs if r.status != "ok"]
    bad = [[p.source, p.line, p.reason] for p in problems]
    return prose("results.problems", failed=md_table("results.failed_columns", failed),
                 bad=md_table("results.unusable_columns", bad))


def build(record_paths: Sequence[Path], out_dir: Path, ref_dir: Path = REFERENCE) -> Tuple[Path, List]:
    """Write figures and RESULTS.md; returns (RESULTS.md path, problems)."""
    loaded = records.load_by_file(record_paths)
    recs, problems = [r for _, good, _ in loaded for r in good], [pr for _, _, bad in loaded for pr in bad]
    if not recs and not problems:
        raise ReportError(f"no records in {', '.join(map(str, record_paths))}; run `python -m results.bench quick` "
                          "(or `make bench`) first")
    pub, links = load_reference(ref_dir)
    fig_dir = out_dir / "figures"
    recs = with_efficiency(recs)  # new records: each tag's report (from LOADED) sees its records as read
    train, io, ar = by_kind(recs, "train"), by_kind(recs, "io"), by_kind(recs, "allreduce")
    overlap, steady, storage = by_kind(recs, "overlap"), by_kind(recs, "pipeline"), by_kind(recs, "storage")
    env = Environments()
    problems = list(problems)
    body = [pipeline_section(io, steady, env, fig_dir),
            step_section(train, env, fig_dir),
            step_section(train, env, fig_dir, gpu=True), gpu_step.targets_section(train),
            gpu_step.profile_section(train), amp_parity.parity_section(train),
            multinode_section(train, env), throughput_section(train, pub, env, fig_dir),
            time_section(train, pub, env, fig_dir),
            curves_section(train, env, fig_dir, problems), io_section(io, pub, env, fig_dir),
            *([storage_section(storage, env, fig_dir)] if storage else []),
            allreduce_section(ar, env, fig_dir), overlap_section(overlap, env),
            model_section(train, ar, overlap, pub, links, env, fig_dir),
            whole_step.section(train, steady, overlap, pub, links, fig_dir, storage),
            data_scale.section(recs), prepare.section(recs), faults.section(recs),
            *([tta] if (tta := time_to_accuracy.section(recs, fig_dir, ref_dir)) else [])]
    body = [targets.section(recs, train), clusters_section(loaded, out_dir), questions_section(body), *body]
    # each record keeps its command line (environment.command); the report no longer repeats them
    tail = [problems_section(recs, problems, env), "## Environments\n\n" + env.table()]
    head = prose("results.head", records=len(recs), ok=sum(r.status == "ok" for r in recs),
                 failed=sum(r.status != "ok" for r in recs), unusable=len(problems),
                 files=", ".join(f"`{_rel(p)}`" for p in record_paths)) + "\n"
    path = out_dir / "RESULTS.md"
    write_text(path, fold_long_tables("\n".join([head, *body, *tail])))
    log.info("wrote %s (%d records, %d problems)", path, len(recs), len(problems))
    return path, problems


def clusters_section(loaded: Sequence[Tuple[Path, List[dict], List]], out_dir: Path) -> str:
    """Write one report per records file (tag) under out_dir/reports/ and a table linking them."""
    rows = []
    for f, good, bad in loaded:
        _, h = cluster.build_tag(f.stem, f, out_dir / "reports" / f.stem, loaded=(good, bad))
        best, eff = h["best"], h["efficiency"]
        rows.append([f"[{f.stem}](reports/{f.stem}/README.md)", f"{h['nodes']} x {h['hardware']}",
                     ", ".join(h["kinds"]), f"{best[0]} ({best[2]})" if best else "-",
                     f"{eff[0]} at {eff[1]}" if eff else "-", h["binding"] or "-"])
    return prose("results.clusters", table=md_table("results.clusters_columns", rows))


def questions() -> List[List[str]]:
    """The questions RESULTS.md answers, each followed by the sections (headings) that answer it."""
    return [line[2:].split(" | ") for line in prose("results.answers", tta=time_to_accuracy.HEADING).splitlines()[1:]]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return "".join(c for c in heading.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def questions_section(body: Sequence[str]) -> str:
    present = {line[3:].strip() for part in body for line in part.splitlines() if line.startswith("## ")}
    rows = [[q, ", ".join(f"[{h}](#{_anchor(h)})" for h in hs if h in present)] for q, *hs in questions()
            if any(h in present for h in hs)]
    return prose("results.questions", table=md_table("results.questions_columns", rows))


FOLD_ROWS = 12  # a table longer than this folds under its figure: the page stays readable, every row stays


def fold_long_tables(text: str) -> str:
    """Wrap each markdown table of more than FOLD_ROWS rows in a <details> block."""
    out, table = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            rows = len(table) - 2
            if rows > FOLD_ROWS:
                table = [f"<details><summary>table: {rows} rows</summary>", "", *table, "", "</details>"]
            out += table
            table = []
        out.append(line)
    return "\n".join(out[:-1])


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m results.report", description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="+", type=Path, default=[records.RECORDS_DIR],
                    help="record files or folders of *.jsonl (default results/records)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where RESULTS.md and figures/ go (default results)")
    ap.add_argument("--reference", type=Path, default=REFERENCE, help=argparse.SUPPRESS)
    ap.add_argument("--tag", help="only the report of this tag: results/records/TAG.jsonl (or the one --records "
                    "file) -> OUT/reports/TAG/README.md and its figures")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.tag:
        a.records = a.records if a.records != [records.RECORDS_DIR] else [records.RECORDS_DIR / f"{a.tag}.jsonl"]
    missing = [p for p in a.records if not Path(p).exists()]
    try:
        if missing:
            raise ReportError(f"{missing[0]} does not exist; pass record files or a folder of *.jsonl"
                              + (f" (or run `python -m results.bench scaling --tag {a.tag}` first)" if a.tag else ""))
        if a.tag:
            if len(a.records) != 1 or Path(a.records[0]).is_dir():
                raise ReportError("--tag takes one records file; pass --records FILE.jsonl or none")
            cluster.build_tag(a.tag, Path(a.records[0]), a.out / "reports" / a.tag)
            return 0
        _, problems = build(a.records, a.out, a.reference)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"warning: {len(problems)} record(s) could not be used; listed in RESULTS.md", file=sys.stderr)
    return 0

