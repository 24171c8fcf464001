"""The race's command line: ``python -m studies.fashion_mnist_race run [flags]`` races the two programs,
``... report`` writes the write-up (:mod:`studies.cli` holds what every study's command shares)."""
import argparse
from typing import Optional, Sequence

from studies import cli
from studies.fashion_mnist_race import RECORDS, __doc__ as DOC, report, runner

PROG = "python -m studies.fashion_mnist_race"
MEASUREMENTS = {"run": (runner.add_parser, runner.run)}


def build_parser() -> argparse.ArgumentParser:
    return cli.parser(PROG, DOC, MEASUREMENTS, RECORDS)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return cli.main(PROG, DOC, MEASUREMENTS, RECORDS, {"run": runner.DEFAULT_TAG}, report.build, argv)
