"""A real ``sbatch --test-only`` on the 4-node x 4-GPU test cluster accepts every committed job
file that hpc_imagenet.slurm.generate writes, and refuses what the cluster cannot run."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpc_imagenet.slurm.generate import render, spec_from_args
from tests.helpers import REPO
from hpc_imagenet.slurm.localcluster import SlurmCluster

COMMITTED = sorted((REPO / "slurm").glob("*.sh"))


def _test_only(cluster: SlurmCluster, path: Path) -> subprocess.CompletedProcess:
    return cluster.run(["sbatch", "--test-only", str(path)], check=False, cwd=REPO)


@pytest.mark.slurm
@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_sbatch_test_only_accepts_committed_file(slurm_cluster: SlurmCluster, path: Path) -> None:
    proc = _test_only(slurm_cluster, path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


@pytest.mark.slurm
def test_sbatch_test_only_rejects_what_the_cluster_cannot_run(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The check above can fail: 5 nodes or 8 GPUs per node do not fit the 4 x 4 cluster."""
    for argv in (["--nodes", "5"], ["--gpus-per-node", "8"]):
        path = tmp_path / "job.sh"
        path.write_text(render(spec_from_args(argv)))
        proc = _test_only(slurm_cluster, path)
        assert proc.returncode != 0, f"{argv} accepted: {proc.stderr}"


@pytest.mark.slurm
def test_sbatch_test_only_accepts_site_options_and_arrays(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(render(spec_from_args(["--nodes", "2", "--mem", "64G", "--time", "1-00:00:00",
                                           "--partition", "debug", "--sweep", "BATCH_SIZE=64,128"])))
    proc = _test_only(slurm_cluster, path)
    assert proc.returncode == 0, proc.stderr
