"""``python -m studies.published_model --check``: the whole-step model predicted at every published point;
``--check-time-to-accuracy``: predicted vs published time to train.

Each prints the model's measured inputs, one row per published point (prediction, error, each term)
and the misses, and exits 1 when a point is off by more than the tolerance. The arithmetic is
``studies.published_model.whole_step`` and ``studies.published_model.time_to_train``; the words and the tables are
``studies.published_model.whole_step_section``'s and ``studies.published_model.tta_check``'s.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.records import by_kind
from hpc_imagenet.harness.report.common import ReportError
from studies.published_model import REFERENCE, load_reference, report, tta_check, whole_step
from studies.published_model import time_to_train as time_to_accuracy
from studies.published_model import whole_step_section as text


def _inputs(record_paths: Sequence[Path], ref_dir: Path) -> Tuple[List[dict], dict, dict, whole_step.Measured]:
    """(records, published numbers, cited links, the model's measured inputs)."""
    recs = [r for r in records.load_typed(record_paths)[0] if r.counted()] if record_paths else []
    pub, links = load_reference(ref_dir)
    return recs, pub, links, whole_step.measured(by_kind(recs, "train"), by_kind(recs, "pipeline"),
                                                 by_kind(recs, "overlap"))


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Columns padded to their widest cell; an empty cell as '-'."""
    cells = [["-" if c is None else str(c) for c in line] for line in [headers, *rows]]
    widths = [max(len(c) for c in column) for column in zip(*cells)]
    for line in cells:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))


def run_check(record_paths: Sequence[Path], ref_dir: Path) -> int:
    """``--check``: print predicted vs published images/s; 1 when a point is missed."""
    _, pub, links, got = _inputs(record_paths, ref_dir)
    rows = whole_step.check_rows(whole_step.cases(pub, links, got))
    print(text.inputs_text(got, links) + "\n")
    _print_table(text.HEADERS, text.table_rows(rows))
    print("\n" + text.summary(rows) + text.dle_bracket(rows))
    return 1 if whole_step.failures(rows) else 0


def run_time_check(record_paths: Sequence[Path], ref_dir: Path) -> int:
    """``--check-time-to-accuracy``: print every published time-to-train point with its prediction; 1 when
    a predicted point is missed."""
    recs, pub, links, got = _inputs(record_paths, ref_dir)
    ref = json.loads((ref_dir / "epochs_to_accuracy.json").read_text())
    cases = {c.name: c.model for c in whole_step.cases(pub, links, got)}
    system = ref["systems"]["DGX_H100"]
    h100 = time_to_accuracy.h100_model(by_kind(recs, "train"), system,
                                       parameter_count("resnet50") * system["grad_bytes_per_param"])
    rows = time_to_accuracy.check_rows(ref, cases, h100, pub["nvidia_dle_2021"]["train_img_per_s"])
    print(f"Throughput inputs: {ref['throughput_inputs']}. H100 record: {h100[1] or 'none'}.\n")
    _print_table(tta_check.HEADERS, tta_check.table_rows(rows))
    print("\n" + tta_check.summary(rows))
    return 1 if time_to_accuracy.failures(rows) else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Predicted vs every published point; exit 1 if one is off by more than the tolerance."""
    ap = argparse.ArgumentParser(prog="python -m studies.published_model", description=main.__doc__)
    ap.add_argument("--check", action="store_true", help="compare with the published points (exit 1 on a miss)")
    ap.add_argument("--check-time-to-accuracy", action="store_true",
                    help="compare predicted with published times to train (exit 1 on a miss)")
    ap.add_argument("--records", nargs="*", type=Path, default=list(report.RECORDS),
                    help="record files or folders of *.jsonl (default: results/records and the benches' overlap "
                         "records, as the write-up reads; none: no measured inputs)")
    ap.add_argument("--reference", type=Path, default=REFERENCE, help="published data and cited links")
    args = ap.parse_args(argv)
    if not (args.check or args.check_time_to_accuracy):
        print(f"wrote {report.build()}")
        return 0
    missing = [p for p in args.records if not Path(p).exists()]
    try:
        if missing:
            raise ReportError(f"{missing[0]} does not exist; pass record files or a folder of *.jsonl")
        run = run_time_check if args.check_time_to_accuracy else run_check
        return run(args.records, args.reference)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
