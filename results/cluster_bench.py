"""``python -m results.bench cluster-scaling``: multi-node gloo DDP scaling on the SLURM test cluster.

Brings up the cluster of :mod:`tests.slurm_cluster` (real slurmctld/slurmd, one network namespace
per node, so every rank talks gloo over its own veth and the bridge), runs one ``results.bench
train --submit slurm`` sweep over 1, 2 and 4 nodes with one CPU process per node, tears the
cluster down and regenerates the report.

The nodes are namespaces on this one host: they share its cores and memory bandwidth. With one
thread per process, n nodes need n cores, so on a host with c cores the efficiency beyond c nodes
is bounded by c/n; each record carries the host's core count and a note saying so.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from typing import Dict, Iterator, List

log = logging.getLogger(__name__)

DEFAULT_NODES = (1, 2, 4)


@contextlib.contextmanager
def environment(settings: Dict[str, str]) -> Iterator[None]:
    """os.environ plus ``settings`` for the block (sbatch finds the cluster through SLURM_CONF)."""
    saved = dict(os.environ)
    os.environ.update(settings)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def train_argv(a: argparse.Namespace) -> List[str]:
    """The ``results.bench train`` sweep the cluster runs: 1 process and 1 thread per node."""
    note = (f"test cluster (tests/slurm_cluster.py): {max(a.nodes)} SLURM nodes as network namespaces on one "
            f"host with {os.cpu_count()} cores, gloo over veth + bridge; 1 process x 1 thread per node, so "
            f"points beyond {os.cpu_count()} nodes share cores")
    return ["train", "--submit", "slurm", "--gpus-per-node", "0", "--cpus-per-task", "1", "--procs", "1",
            "--nodes", *map(str, a.nodes), "-a", a.arch, "--image-size", str(a.image_size),
            "--batch", str(a.batch), "--epochs", "1", "--steps-per-epoch", str(a.steps_per_epoch),
            "--val-steps", "1", "--time-limit", "00:20:00", "--timeout", str(a.timeout), "--note", note,
            "--tag", a.tag, "--records", str(a.records), "--extra=--seed=0"]


def run(a: argparse.Namespace) -> int:
    """Cluster up, sweep, cluster down (always), then the report."""
    from results import bench, report
    from tests.slurm_cluster import ClusterUnavailable, SlurmCluster
    if a.fresh:
        bench._forget(a.tag, a.records)
    t0 = time.monotonic()
    try:
        cluster = SlurmCluster(nodes=max(a.nodes), gpus_per_node=0).start()
    except ClusterUnavailable as e:
        raise bench.BenchError(f"cannot host the SLURM test cluster here: {e}") from None
    log.info("test cluster with %d nodes up in %.0f s (SLURM_CONF=%s)", max(a.nodes), time.monotonic() - t0,
             cluster.conf)
    try:
        with environment({"SLURM_CONF": str(cluster.conf), "PATH": cluster.env["PATH"]}):
            rc = bench.main(train_argv(a))
    finally:
        cluster.stop()
    log.info("cluster-scaling sweep done in %.0f s (exit %d)", time.monotonic() - t0, rc)
    report_rc = report.main([]) if a.report else 0
    return rc or report_rc  # a sweep whose points all failed stays a failure after the report


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    c = sub.add_parser("cluster-scaling", parents=[common], help="1-2-4 node gloo DDP on the SLURM test "
                       "cluster (needs root; starts and stops it), then the report")
    c.add_argument("--nodes", nargs="+", type=int, default=list(DEFAULT_NODES))
    c.add_argument("-a", "--arch", default="resnet18")
    c.add_argument("--image-size", type=int, default=64)
    c.add_argument("--batch", type=int, default=16, help="batch per process")
    c.add_argument("--steps-per-epoch", type=int, default=25)
    c.add_argument("--timeout", type=float, default=900, help="seconds per point")
    c.add_argument("--fresh", action="store_true", help="replace this tag's earlier records and runs")
    c.add_argument("--no-report", dest="report", action="store_false", help="skip regenerating the report")

