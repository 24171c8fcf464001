"""``python -m hpc_imagenet.harness.bench faults``: run the fault and recovery scenarios on a local SLURM
cluster (:mod:`hpc_imagenet.slurm.localcluster`, needs root) and record each one's measurement.

The scenarios live in :mod:`hpc_imagenet.slurm.localcluster.scenarios` (the cluster tests assert on the same
ones); this brings a 4-node cluster up, runs them one at a time (each fault's times are then its
own, not those of faults sharing the cores with others) and appends one ``fault`` record per
scenario that passed its checks. A scenario that failed is logged and makes the exit status 1.
``--only`` picks scenarios by name, ``--rounds`` repeats the set so the report's median and maximum
time to detect have more than one sample. ``hpc_imagenet.harness.bench`` writes the report afterwards.
"""
from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import Dict, List

from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.harness.core import records
from hpc_imagenet.slurm.localcluster import ClusterError, ClusterUnavailable, SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import scenario_data
from hpc_imagenet.slurm.localcluster.scenarios.measure import Measurement
from hpc_imagenet.slurm.localcluster.scenarios.waves import NAMES, WAVES, run_wave

log = logging.getLogger(__name__)


def fault_record(measurement: Measurement, sweep: str, scenario: str) -> Dict:
    """The ``fault`` record of SCENARIO's measurement (see hpc_imagenet/harness/report/faults.py); its command
    reruns that scenario alone."""
    metrics = {"survived": int(measurement.survived), "steps_trained_twice": measurement.steps_trained_twice,
               "checkpoints_lost": measurement.checkpoints_lost}
    for key in ("detect_s", "recover_s", "seconds_lost"):
        value = getattr(measurement, key)
        if value is not None:
            metrics[key] = round(value, 2)
    if measurement.recovered is not None:
        metrics["recovered"] = int(measurement.recovered)
    point = {"fault": measurement.fault, "launcher": measurement.launcher, "nodes": measurement.nodes}
    return records.make_record("fault", sweep, point, metrics, sysinfo.collect(nodes=measurement.nodes),
                               command=f"python -m hpc_imagenet.harness.bench faults --only {scenario}",
                               **measurement.extra)


def _one_round(cluster: SlurmCluster, data: Path, work: Path, only: List[str], sweep: str, path: Path) -> int:
    """Every chosen scenario once, one at a time; how many failed."""
    failed = 0
    for wave in WAVES:
        outcomes = run_wave(cluster, data, wave, lambda name: Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work)),
                            only=only, at_once=1)
        for name, future in outcomes.items():
            if future.exception() is not None:
                failed += 1
                log.error("scenario %s failed: %s", name, future.exception())
            elif isinstance(future.result(), Measurement):
                records.append(path, fault_record(future.result(), sweep, name))
                log.info("scenario %s recorded in %s", name, path)
    return failed


def run(args: argparse.Namespace) -> int:
    only = args.only or NAMES
    sweep = records.new_sweep_id("fault", args.tag)
    failed = 0
    try:
        with tempfile.TemporaryDirectory(prefix="faults-") as work, SlurmCluster(nodes=4, gpus_per_node=4) as cluster:
            data = scenario_data(Path(work) / "data")
            for index in range(args.rounds):
                log.info("[%d/%d] %s -> %s", index + 1, args.rounds, " ".join(only), args.records)
                failed += _one_round(cluster, data, Path(work), only, sweep, args.records)
    except (ClusterUnavailable, ClusterError) as exc:  # no cluster: a failure, never a skip
        log.error("error: the local SLURM cluster cannot run the scenarios: %s", exc)
        return 2
    return 1 if failed else 0


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("faults", parents=[common], help="fault scenarios on a local SLURM cluster "
                            "(needs root), recorded, then the report")
    parser.add_argument("--rounds", type=int, default=1, help="how many times to run the whole set")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="SCENARIO",
                        help=f"run only these scenarios (default: all): {', '.join(NAMES)}")
    parser.add_argument("--no-report", dest="report", action="store_false", help="skip regenerating the report")
