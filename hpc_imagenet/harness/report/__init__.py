"""Records + TensorBoard events -> ``results/RESULTS.md`` and one report per tag (``results/reports/<tag>/``).

    python -m hpc_imagenet.harness.report                      # all of results/records/*.jsonl: RESULTS.md and each
    tag's report
    python -m hpc_imagenet.harness.report --tag T              # results/records/T.jsonl alone -> results/reports/T/
    python -m hpc_imagenet.harness.report --records FILE.jsonl --out DIR

RESULTS.md is the first screen: the targets (goal, best measured, met, record), a table of the tags, each
linked to its report (:mod:`hpc_imagenet.harness.report.cluster`, the same sections over each tag's records), and the
project's studies. Every number comes from a record or a run's TensorBoard events; records that cannot be
used are listed in their tag's report, not dropped. Output is deterministic (no timestamps), so regenerating
the committed report from the committed records changes nothing.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import QUIET_SHARE
from hpc_imagenet.harness.core.records import by_kind
from hpc_imagenet.harness.report import cluster, targets
from hpc_imagenet.harness.report.common import REPO, RESULTS, ReportError, md_table, prose

__all__ = ["build", "main", "ReportError"]

log = logging.getLogger(__name__)


def build(record_paths: Sequence[Path], out_dir: Path, quiet_share: float = QUIET_SHARE) -> Tuple[Path, List]:
    """Write RESULTS.md and every tag's report, points of a machine busier than QUIET_SHARE left out of their
    figures; returns (RESULTS.md path, problems)."""
    loaded = records.load_by_file(record_paths)
    recs, problems = [r for _, good, _ in loaded for r in good], [pr for _, _, bad in loaded for pr in bad]
    if not recs and not problems:
        raise ReportError(f"no records in {', '.join(map(str, record_paths))}; run `python -m "
                          f"hpc_imagenet.harness.bench quick` "
                          "(or `make bench`) first")
    head = prose("results.head", records=len(recs), ok=sum(r.status == "ok" for r in recs),
                 failed=sum(r.status != "ok" for r in recs), unusable=len(problems),
                 files=", ".join(f"`{_rel(p)}`" for p in record_paths)) + "\n"
    counted = [r for r in recs if r.counted(quiet_share)]
    body = [head, targets.section(counted, by_kind(counted, "train")), clusters_section(loaded, out_dir, quiet_share),
            prose("results.studies")]
    path = out_dir / "RESULTS.md"
    write_text(path, "\n".join(body))
    log.info("wrote %s (%d records, %d problems)", path, len(recs), len(problems))
    return path, problems


CLUSTERS_COLUMNS = ("report", "nodes x hardware", "kinds of points", "best training throughput",
                    "efficiency at the largest scale", "failed points / not counted / unusable lines")


def clusters_section(loaded: Sequence[Tuple[Path, List[dict], List]], out_dir: Path, quiet_share: float) -> str:
    """Write one report per records file (tag) under out_dir/reports/ and a table linking them."""
    rows = []
    for f, good, bad in loaded:
        _, h = cluster.build_tag(f.stem, f, out_dir / "reports" / f.stem, (good, bad), quiet_share)
        best, eff = h["best"], h["efficiency"]
        rows.append([f"[{f.stem}](reports/{f.stem}/README.md)", f"{h['nodes']} x {h['hardware']}",
                     ", ".join(h["kinds"]), f"{best[0]} ({best[2]})" if best else "-",
                     f"{eff[0]} at {eff[1]}" if eff else "-",
                     f"{h['records'] - h['ok']} / {h['uncounted']} / {len(bad)}"])
    return prose("results.clusters", table=md_table(CLUSTERS_COLUMNS, rows))


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_imagenet.harness.report", description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="+", type=Path, default=[records.RECORDS_DIR],
                    help="record files or folders of *.jsonl (default results/records)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where RESULTS.md and reports/ go (default results)")
    ap.add_argument("--tag", help="only the report of this tag: results/records/TAG.jsonl (or the one --records "
                    "file) -> OUT/reports/TAG/README.md and its figures")
    ap.add_argument("--quiet-share", type=float, default=QUIET_SHARE, help="a point counts when other processes "
                    "used at most this share of the machine's CPU while it ran (default 0.1; 1 counts every point)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.tag:
        a.records = a.records if a.records != [records.RECORDS_DIR] else [records.RECORDS_DIR / f"{a.tag}.jsonl"]
    missing = [p for p in a.records if not Path(p).exists()]
    try:
        if missing:
            raise ReportError(f"{missing[0]} does not exist; pass record files or a folder of *.jsonl"
                              + (f" (or run `python -m hpc_imagenet.harness.bench scaling --tag {a.tag}` "
                                 f"first)" if a.tag else ""))
        if a.tag:
            if len(a.records) != 1 or Path(a.records[0]).is_dir():
                raise ReportError("--tag takes one records file; pass --records FILE.jsonl or none")
            cluster.build_tag(a.tag, Path(a.records[0]), a.out / "reports" / a.tag, quiet_share=a.quiet_share)
            return 0
        _, problems = build(a.records, a.out, a.quiet_share)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"warning: {len(problems)} record(s) could not be used; listed in their tag's report", file=sys.stderr)
    return 0

