"""The one-off benches' command line: ``python -m studies.benches overlap|region|prepare [flags]`` measures,
``... report`` writes the write-up (:mod:`studies.cli` holds what every study's command shares)."""
from typing import Optional, Sequence

from hpc_imagenet.harness.core.records import SCRATCH_DIR
from studies import cli
from studies.benches import RECORDS, __doc__ as DOC, overlap, prepare, region, report

MEASUREMENTS = {"overlap": (overlap.add_parser, overlap.run), "region": (region.add_parser, region.run),
                "prepare": (prepare.add_parser, lambda a: prepare.run(a, SCRATCH_DIR))}


def main(argv: Optional[Sequence[str]] = None) -> int:
    return cli.main("python -m studies.benches", DOC, MEASUREMENTS, RECORDS, {}, report.build, argv)
