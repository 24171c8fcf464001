"""Recovery without a user on the test cluster: faults injected into tiny real jobs that the
generated batch files must survive on their own (a killed rank, a node's processes killed, a
training crashing at every start (4 starts, then one line), a node failure, a stopped rank). The scenarios are
hpc_imagenet/slurm/localcluster/scenarios/recovery.py's, the ones ``python -m hpc_imagenet.harness.bench faults``
records;
each test here re-raises its scenario's failed check.

The scenarios run at once, in waves on the session's cluster (tests/cluster/scenarios.py): most of a
fault's time is waiting (the requeue hold, a collective timeout, a restart) while the others train.
Each scenario's jobs are kept off the nodes another scenario's fault reaches.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.recovery import KILLS
from hpc_imagenet.slurm.localcluster.scenarios.waves import RECOVERY_WAVES
from tests.cluster.scenarios import Scenarios, by_test_name

pytestmark = pytest.mark.slurm
BATCH_LOOP_TEST = "test_the_batch_loop_restarts_a_failed_step_in_the_same_allocation"
KILL_SCENARIOS = dict(zip(KILLS, ("rank-killed", "node-processes-killed")))  # the fault -> its scenario
TESTS = {  # test -> its scenario
    "test_a_node_failure_requeues_the_job_elsewhere_and_resumes_exactly": "node-failure",
    **{f"{BATCH_LOOP_TEST}[{fault}]": scenario for fault, scenario in KILL_SCENARIOS.items()},
    "test_a_stopped_rank_ends_the_step_within_the_collective_timeout_naming_it": "stopped-rank",
    "test_torchrun_restarts_a_killed_rank_in_the_same_allocation": "torchrun-worker-killed",
    "test_a_failure_repeating_past_the_bound_ends_the_job_with_one_line": "repeating-failure",
}


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path) -> Scenarios:
    return Scenarios(request, slurm_cluster, data, by_test_name(RECOVERY_WAVES, TESTS))


def test_torchrun_restarts_a_killed_rank_in_the_same_allocation(scenarios: Scenarios,
                                                                request: pytest.FixtureRequest) -> None:
    """One torchrun worker killed: the agent restarts the workers, they resume."""
    scenarios.outcome(request.node.name)


@pytest.mark.parametrize("fault", list(KILLS))
def test_the_batch_loop_restarts_a_failed_step_in_the_same_allocation(scenarios: Scenarios,
                                                                      request: pytest.FixtureRequest,
                                                                      fault: str) -> None:
    """A rank or a node's processes killed: the loop starts the step again."""
    scenarios.outcome(request.node.name)


def test_a_failure_repeating_past_the_bound_ends_the_job_with_one_line(scenarios: Scenarios,
                                                                       request: pytest.FixtureRequest) -> None:
    """Workers that crash at every start: 4 starts in all (torchrun's and the loop's), then one line."""
    scenarios.outcome(request.node.name)


def test_a_node_failure_requeues_the_job_elsewhere_and_resumes_exactly(scenarios: Scenarios,
                                                                        request: pytest.FixtureRequest) -> None:
    """A node DOWN: SLURM requeues the job elsewhere, it resumes exactly."""
    scenarios.outcome(request.node.name)


def test_a_stopped_rank_ends_the_step_within_the_collective_timeout_naming_it(
        scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """A stopped rank is named within --collective-timeout and the step restarts."""
    scenarios.outcome(request.node.name)
