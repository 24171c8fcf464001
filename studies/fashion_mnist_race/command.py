"""The race's command line: ``python -m studies.fashion_mnist_race run [flags]`` races the two programs,
``... report`` writes the write-up, ``... check`` recomputes the headline from the records (:mod:`studies.cli`
holds what every study's command shares)."""
import argparse
import sys
from typing import Optional, Sequence

from studies import cli
from studies.fashion_mnist_race import RECORDS, __doc__ as DOC, headline, protocol_round, report, runner

PROG = "python -m studies.fashion_mnist_race"
MEASUREMENTS = {"run": (runner.add_parser, protocol_round.run)}


def build_parser() -> argparse.ArgumentParser:
    return cli.parser(PROG, DOC, MEASUREMENTS, RECORDS)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:  # reads the records alone: none of the harness's measuring flags
        return headline.check(argv[1:])
    return cli.main(PROG, DOC, MEASUREMENTS, RECORDS, {"run": runner.DEFAULT_TAG}, report.build, argv)
