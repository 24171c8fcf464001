"""``python -m results.bench faults``: run the chaos tests on the SLURM test cluster and record them.

The scenarios live in ``tests/cluster/test_slurm_faults.py`` and
``tests/cluster/test_slurm_recovery.py`` (one copy of each, also run by ``make test``); this runs
them with pytest in a subprocess (results/ never imports tests/) and tells them, through the
environment, where to append their ``fault`` records. ``--rounds`` repeats the set so the report's
median and maximum time to detect have more than one sample. ``results.bench`` writes the report
afterwards.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys

from results.core import records

log = logging.getLogger(__name__)

TESTS = ("tests/cluster/test_slurm_faults.py", "tests/cluster/test_slurm_recovery.py")


def run(a: argparse.Namespace) -> int:
    sweep = records.new_sweep_id("fault", a.tag)
    env = {**os.environ, "HPC_IMAGENET_FAULT_RECORDS": str(a.records), "HPC_IMAGENET_FAULT_SWEEP": sweep,
           "HPC_IMAGENET_REQUIRE_SLURM": "1"}  # no cluster: a failure, not a skip
    rc = 0
    for i in range(a.rounds):
        log.info("[%d/%d] %s -> %s", i + 1, a.rounds, " ".join(TESTS), a.records)
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                            cwd=records.RESULTS_DIR.parent, env=env).returncode or rc
    return rc


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    f = sub.add_parser("faults", parents=[common], help="chaos tests on the SLURM test cluster (needs root), "
                       "recorded, then the report")
    f.add_argument("--rounds", type=int, default=1, help="how many times to run the whole set")
    f.add_argument("--no-report", dest="report", action="store_false", help="skip regenerating the report")
