"""What every study's command line shares: the harness's flags (--tag, --records, -v), one subcommand per
measurement, ``report`` to write the study's RESULTS.md, a failed point recorded and a bad flag one line.

    python -m studies.NAME KIND [flags]     # measure; records go to studies/NAME/records/<tag>.jsonl
    python -m studies.NAME report           # studies/NAME/RESULTS.md from those records
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness import bench
from hpc_imagenet.harness.core.kinds import from_dict
from hpc_imagenet.harness.report.common import ReportError
from hpc_imagenet.harness.runners.common import BenchError

# a measurement: (add its subparser to SUB with the common PARENT, run it on the parsed args -> records)
Measurement = Tuple[Callable[[argparse._SubParsersAction, argparse.ArgumentParser], None],
                    Callable[[argparse.Namespace], List[dict]]]


def parser(prog: str, doc: str, measurements: Dict[str, Measurement], records_dir: Path) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--tag", help="name of this machine/run set; records go to "
                        f"{records_dir.relative_to(records_dir.parents[2])}/<tag>.jsonl (default: the command's)")
    common.add_argument("--records", type=Path, help="records file (default: the tag's, in this study's records/)")
    common.add_argument("-v", "--verbose", action="store_true")
    for add, _ in measurements.values():
        add(sub, common)
    sub.add_parser("report", help="write this study's RESULTS.md from its records")
    return ap


def main(prog: str, doc: str, measurements: Dict[str, Measurement], records_dir: Path, default_tags: Dict[str, str],
         report: Callable[[], Path], argv: Optional[Sequence[str]] = None) -> int:
    a = parser(prog, doc, measurements, records_dir).parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(a, "verbose", False) else logging.INFO, format="%(message)s")
    try:
        if a.cmd == "report":
            logging.info("wrote %s", report())
            return 0
        bench.validate_counts(a)  # the harness's checks of counts (--world-sizes 1, --rounds 0, ...)
        a.tag = a.tag or default_tags.get(a.cmd, a.cmd)
        a.records = a.records or records_dir / f"{a.tag}.jsonl"
        out = measurements[a.cmd][1](a)
    except (BenchError, ReportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = sum(not from_dict(r).ok for r in out)
    logging.info("%d point(s) recorded in %s, %d failed", len(out), a.records, failed)
    return 1 if failed == len(out) and out else 0


def run_as_main(main: Callable[[], int]) -> None:
    """A study's ``__main__``: ``kill`` stops a measurement as Ctrl-C does, so what it runs stops with it."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
