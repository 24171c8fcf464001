"""Fixtures of the cluster tier: a real local SLURM cluster (hpc_imagenet/slurm/localcluster/) for each pytest
process that runs cluster tests (make test: two, one per xdist group of tests/conftest.py), started
by the first test that asks for it and stopped when pytest ends; and the dataset the requeue and
fault jobs train on."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpc_imagenet.slurm.localcluster import REQUIRE_ENV, ClusterUnavailable, SlurmCluster
from hpc_imagenet.slurm.localcluster import image as test_image
from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.scenarios.jobs import REPO, scenario_data


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running 4-node x 4-GPU cluster with accounting. Where this machine cannot host it the tests
    skip, unless CI requires the cluster ($HPC_IMAGENET_REQUIRE_SLURM), and then they fail. pytest
    keeps a failed start-up and gives the same outcome to every later test that asks."""
    try:
        cluster = SlurmCluster(nodes=4, gpus_per_node=4).start()
    except ClusterUnavailable as exc:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"SLURM test cluster required ({REQUIRE_ENV} is set) but unavailable: {exc}")
        pytest.skip(f"SLURM test cluster unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """192 training images: 12 steps per epoch for 2 processes of batch 8."""
    return scenario_data(tmp_path_factory.mktemp("requeue_data"))


@pytest.fixture(scope="session")
def container_image() -> Path:
    """The cached container image of the test cluster (hpc_imagenet/slurm/localcluster/image.py, built on first use),
    with a
    mount point for the checkout. Where it cannot be built the tests skip, unless CI requires the cluster tier."""
    try:
        return test_image.ensure([str(REPO)])
    except ClusterError as exc:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"the container tier is required ({REQUIRE_ENV} is set) but its image is unavailable: {exc}")
        pytest.skip(f"no container image: {exc}")


@pytest.fixture
def on_cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """This test process pointed at the test cluster: for code that calls sbatch/squeue/sacct itself (the
    job chain, submitit)."""
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm_cluster.env[key])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return slurm_cluster

