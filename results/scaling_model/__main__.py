"""``python -m results.scaling_model --check``: the whole-step model predicted at every published point;
``--check-time-to-accuracy``: predicted vs published time to train (``results.report.tta_check``).

It prints the model's measured inputs, one row per published point (prediction, error band, each
term) and the misses, and exits 1 when a point is off by more than the tolerance. The arithmetic is
``results.analysis.whole_step``; the words and the table are ``results.report.whole_step``'s.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from results.analysis import whole_step
from results.core import records
from results.core.records import by_kind
from results.report import tta_check
from results.report import whole_step as text


def run_check(record_paths: Sequence[Path], ref_dir: Path) -> int:
    """``python -m results.scaling_model --check``: print predicted vs published, return the exit code."""
    recs, _ = records.load(record_paths) if record_paths else ([], [])
    pub = json.loads((ref_dir / "published_resnet50.json").read_text())
    links = json.loads((ref_dir / "links.json").read_text())
    h, h_rec = whole_step.model_overlap(by_kind(recs, "overlap"))
    got = whole_step.measured(by_kind(recs, "train"), by_kind(recs, "pipeline"), h, h_rec["_source"] if h_rec else None)
    rows = whole_step.check_rows(whole_step.cases(pub, links, got))
    print(text.inputs_text(got, links) + "\n")
    widths = [max(len(str(c)) for c in col) for col in zip(text.HEADERS, *text.table_rows(rows))]
    for line in [text.HEADERS, *text.table_rows(rows)]:
        print("  ".join(str("-" if c is None else c).ljust(w) for c, w in zip(line, widths)))
    print("\n" + text.summary(rows) + text.dle_bracket(rows))
    return whole_step.exit_code(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Predicted vs every published point; exit 1 if one is off by more than the tolerance."""
    ap = argparse.ArgumentParser(prog="python -m results.scaling_model", description=main.__doc__)
    ap.add_argument("--check", action="store_true", help="compare with the published points (exit 1 on a miss)")
    ap.add_argument("--check-time-to-accuracy", action="store_true",
                    help="compare predicted with published times to train (exit 1 on a miss)")
    ap.add_argument("--records", nargs="*", type=Path, default=[records.RECORDS_DIR],
                    help="record files or folders of *.jsonl (default results/records; none: no measured inputs)")
    ap.add_argument("--reference", type=Path, default=records.REFERENCE_DIR, help="published data and cited links")
    args = ap.parse_args(argv)
    if not (args.check or args.check_time_to_accuracy):
        ap.print_help()
        return 0
    missing = [p for p in args.records if not Path(p).exists()]
    if missing:
        print(f"error: {missing[0]} does not exist; pass record files or a folder of *.jsonl", file=sys.stderr)
        return 2
    if args.check_time_to_accuracy:
        return tta_check.run_check(args.records, args.reference)
    return run_check(args.records, args.reference)

if __name__ == "__main__":
    sys.exit(main())
