"""``python -m hpc_imagenet.slurm.localcluster [--nodes N] [--gpus-per-node G] [-- CMD ...]``: bring a local SLURM
cluster up (as root), run CMD with SLURM_CONF set, as a user's login node would have it, then tear
the cluster down and exit with CMD's status. Without CMD: a check that it works (sinfo, a 2-node
``srun hostname`` job, sacct)."""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from typing import List, Optional, Sequence

from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.commands import ClusterError, ClusterUnavailable


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hpc_imagenet.slurm.localcluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="how many nodes (network namespaces); default 2")
    parser.add_argument("--gpus-per-node", type=int, default=4,
                        help="fake GPUs each node declares (0: a CPU cluster); default 4")
    parser.add_argument("--no-accounting", dest="accounting", action="store_false",
                        help="no MariaDB + slurmdbd: starts faster, but sacct and submitit need accounting")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to run against the cluster")
    return parser


def _check(cluster: SlurmCluster) -> None:
    """What a user would try first: the nodes, a job across two of them, its accounting."""
    print(cluster.run(["sinfo"]).stdout, flush=True)
    nodes = min(2, cluster.nodes)
    print(cluster.run(["sbatch", "--wait", f"-N{nodes}", "-o", "check-%j.out", "--wrap", "srun hostname"],
                      cwd=cluster.layout.base).stdout, flush=True)
    for out in sorted(cluster.layout.base.glob("check-*.out")):
        print(f"{out.name}:\n{out.read_text()}", flush=True)
    if cluster.accounting:
        print(cluster.run(["sacct", "-a"]).stdout, flush=True)


def _run_command(cmd: Sequence[str], cluster: SlurmCluster) -> int:
    try:
        return subprocess.run(list(cmd), env=cluster.env).returncode
    except FileNotFoundError:
        print(f"error: no such command: {cmd[0]} (give a program on PATH or its path)", file=sys.stderr)
        return 127


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    cmd: List[str] = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.nodes < 1 or args.gpus_per_node < 0:
        print("error: --nodes must be at least 1 and --gpus-per-node at least 0", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    started = time.monotonic()
    try:
        with SlurmCluster(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                          accounting=args.accounting) as cluster:
            print(f"up in {time.monotonic() - started:.1f}s; SLURM_CONF={cluster.conf}", flush=True)
            if cmd:
                status = _run_command(cmd, cluster)
            else:
                _check(cluster)
                status = 0
    except ClusterUnavailable as exc:
        print(f"error: this machine cannot host the local cluster: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"error: the local cluster failed: {exc}", file=sys.stderr)
        return 1
    print(f"total {time.monotonic() - started:.1f}s")
    return status


if __name__ == "__main__":
    from hpc_imagenet.slurm.localcluster.__main__ import main  # under its one name, not a copy
    raise SystemExit(main())
