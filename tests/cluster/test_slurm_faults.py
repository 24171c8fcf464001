"""Chaos on the test cluster: a node's network gone in mid-step, a full disk while a checkpoint is
written, a slurmd killed, fewer nodes after a requeue. The scenarios (what is injected, what must
follow) are hpc_imagenet/slurm/localcluster/scenarios/faults.py's, the ones ``python -m hpc_imagenet.harness.bench
faults``
records; each test here re-raises its scenario's failed check.

The SLURM scenarios run at once, in waves on the session's cluster (tests/cluster/scenarios.py): much
of a fault's time is waiting (the collective timeout, a job's end, a slurmd coming back) while the
others train. Each scenario's jobs are kept off the nodes another scenario's fault reaches.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hpc_imagenet.slurm.localcluster import ClusterUnavailable, SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios import faults
from hpc_imagenet.slurm.localcluster.scenarios.waves import FAULT_WAVES
from tests.cluster.scenarios import Scenarios, by_test_name

TESTS = {  # test -> its scenario
    "test_network_loss_is_named_within_the_collective_timeout_and_the_step_restarts": "network-loss",
    "test_kill_9_of_a_slurmd_leaves_the_running_job_alone": "slurmd-killed",
    "test_fewer_nodes_after_a_requeue_carry_the_global_sample_position": "fewer-nodes",
}


def test_disk_full_while_saving_keeps_the_last_good_checkpoint(jpeg_data, tmp_path: Path) -> None:
    """One line, exit 2, the epoch-0 checkpoint still loads, a restart elsewhere finishes (no cluster)."""
    try:
        measured = faults.disk_full(None, jpeg_data, tmp_path, ())
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    assert measured.steps_trained_twice == 3 and measured.recovered is False


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path) -> Scenarios:
    return Scenarios(request, slurm_cluster, data, by_test_name(FAULT_WAVES, TESTS))


@pytest.mark.slurm
def test_network_loss_is_named_within_the_collective_timeout_and_the_step_restarts(
        scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """A node's network lost in mid-step: named within --collective-timeout, the step restarts."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_fewer_nodes_after_a_requeue_carry_the_global_sample_position(scenarios: Scenarios,
                                                                       request: pytest.FixtureRequest) -> None:
    """4 -> 2 nodes at a requeue: nothing skipped, nothing trained twice."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_kill_9_of_a_slurmd_leaves_the_running_job_alone(scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """The job completes and the restarted slurmd takes its node back."""
    scenarios.outcome(request.node.name)
