"""Preemption on the test cluster: mid-training, the job is told to stop (the time-limit signal
to the batch script, ``scontrol requeue``, or submitit's USR2); the trainers checkpoint, the job
requeues, restarts and resumes where it stopped. Every step is trained exactly once and the run
ends with the right number of epochs.

The scenarios run at once on the session's cluster (tests/cluster/scenarios.py): most of a requeue
is waiting (the job's end, the requeue hold, the next run's start) while the other jobs train. None
signals anything but its own job, so they share the nodes."""
from __future__ import annotations

import re
from pathlib import Path
from functools import partial
from typing import Callable, Optional, Sequence

import pytest

from hpc_imagenet.slurm import submit as sm
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, TRAIN, release_requeued, requeue_script,
                                                            run_states, stand_in_trainer, submit_script,
                                                            wait_for_progress)
from tests.cluster.requeue import assert_every_step_once, assert_resumed_exactly
from tests.cluster.scenarios import Scenarios, Wave
from hpc_imagenet.slurm.localcluster import SlurmCluster, wait_for

pytestmark = pytest.mark.slurm


def _run_generated(cluster: SlurmCluster, script: Path, run_dir: Path, preempt: Callable[[str], None],
                   when: Optional[Callable[[Callable[[], str]], None]] = None) -> str:
    job_id, log = submit_script(cluster, script, run_dir)
    (when or (lambda log: wait_for_progress(log, 1, 2)))(log)
    preempt(job_id)
    release_requeued(cluster, job_id)
    row = cluster.wait_finished(job_id, timeout=240, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(cluster, job_id) == ["REQUEUED", "COMPLETED"]
    return log()


def _time_limit_signal(launcher: str, slurm_cluster: SlurmCluster, data: Path, tmp_path: Path,
                       pin: Sequence[str]) -> None:
    """What --signal=B:USR2@T does at the time limit: USR2 to the batch script, which passes it on
    its launcher's way (scancel to every process; mpirun relays it); 2 nodes. torchrun's path is
    test_time_limit_signal_during_start_up_is_not_lost."""
    script = requeue_script(tmp_path, data, launcher, nodes=2, procs=1)
    signal_batch = lambda job: slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job])  # noqa: E731
    log = _run_generated(slurm_cluster, script, tmp_path / "run", signal_batch)
    assert "USR2: asking the training processes to checkpoint" in log and "requeueing job" in log
    assert_resumed_exactly(tmp_path / "run", log)


def _scontrol_requeue(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """An operator's (or the scheduler's) requeue: SIGTERM to every process; torchrun, 2 processes."""
    script = requeue_script(tmp_path, data, "torchrun", nodes=1, procs=2)
    requeue = lambda job: slurm_cluster.run(["scontrol", "requeue", job])  # noqa: E731
    log = _run_generated(slurm_cluster, script, tmp_path / "run", requeue)
    assert_resumed_exactly(tmp_path / "run", log)


def _submitit_preemption(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """submitit reaches the cluster through this process's environment (the scenarios fixture sets it)."""
    sub = sm.Submission(train_args=("-a", ARCH, "-b", "8", "--epochs", str(EPOCHS), "--workers", "0", *TRAIN,
                                    str(data)), nodes=2, procs_per_node=1, cpus_per_task=1, time_min=10,
                        folder=str(tmp_path / "submitit" / "%j"), log_dir=str(tmp_path / "run"), cluster="slurm")
    job = sm.submit(sub)
    log = lambda: Path(job.paths.stdout).read_text() if Path(job.paths.stdout).exists() else ""  # noqa: E731
    wait_for_progress(log, 1, 2)
    # submitit's test hook: USR2 to every task, as SLURM does signal_delay_s before the time limit.
    # (Its preemption flavour sends TERM and USR2 back to back; a rank that sees USR2 first takes the
    # TERM as "asked twice" and exits without a checkpoint: see hpc_imagenet/imagenet/process/preemption.py.)
    job._interrupt(timeout=True)
    release_requeued(slurm_cluster, job.job_id)
    summary = sm.result(job)
    assert summary["status"] == "finished"
    assert slurm_cluster.wait_finished(job.job_id, runs=2)["State"] == "COMPLETED"
    assert run_states(slurm_cluster, job.job_id) == ["REQUEUED", "COMPLETED"]
    assert_resumed_exactly(tmp_path / "run", log())


def _batch_started(log: Callable[[], str]) -> None:
    """The batch script's first line: its trap is in place, the trainers are not started yet."""
    wait_for("the batch script to start", lambda: re.search(r"^job \d+ .* start ", log(), re.M), 60, interval=0.1)


def _signal_during_start_up(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """USR2 before torchrun has started its workers (which once inherited it ignored): they stop at
    their first safe step, the job requeues and resumes exactly. Where the signal comes while the
    step's agent is still in its bash, before the trap (a few milliseconds; it happens under load),
    the agent dies of it and the job requeues before any training: every step is then trained once,
    by the next run (test_a_trainer_killed_by_the_signal_while_starting_is_requeued makes that case
    on purpose)."""
    script = requeue_script(tmp_path, data, "torchrun", nodes=1, procs=2)
    signal_batch = lambda job: slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job])  # noqa: E731
    log = _run_generated(slurm_cluster, script, tmp_path / "run", signal_batch, when=_batch_started)
    if "checkpoint saved at epoch" in log:
        assert_resumed_exactly(tmp_path / "run", log)
    else:
        assert "task 0: User defined signal 2" in log and "status 140; requeueing job" in log, log[-3000:]
        assert_every_step_once(tmp_path / "run")


# Stands in for trainers that finish normally although the batch script got its time-limit signal:
# it sends the signal itself and exits 0 once the batch script has logged it.
FINISHING_TRAINER = """#!/bin/sh
trap '' USR2
scancel --batch --signal=USR2 "$SLURM_JOB_ID"
i=0
until grep -qs "USR2: asking" "$OUT_DIR/requeue_srun-$SLURM_JOB_ID.out" || [ $i -ge 600 ]; do
    sleep 0.1; i=$((i + 1))
done
exit 0
"""


def _finishes_after_the_signal(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    script = requeue_script(tmp_path, data, "srun", nodes=1, procs=1)
    trainer = stand_in_trainer(tmp_path, FINISHING_TRAINER)
    job_id, log = submit_script(slurm_cluster, script, tmp_path / "run", f"PYTHON={trainer}", f"OUT_DIR={tmp_path}")
    wait_for("the batch script to decide", lambda: re.search(r"training exited|requeueing", log()), 120)
    if "requeueing" in log():
        slurm_cluster.run(["scancel", job_id], check=False)  # do not leave the wasted run queued
    assert "USR2: asking the training processes to checkpoint" in log()
    assert "training exited with status 0" in log() and "requeueing" not in log(), log()[-3000:]
    assert slurm_cluster.wait_finished(job_id)["State"] == "COMPLETED"
    assert run_states(slurm_cluster, job_id) == ["COMPLETED"]


# Stands in for a trainer that the time-limit signal reaches before its handler is in place (a
# worker still starting): it has the batch script signalled, then dies of the USR2 the batch script
# passes on. After the requeue it finishes.
DYING_TRAINER = """#!/bin/sh
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && exit 0
scancel --batch --signal=USR2 "$SLURM_JOB_ID"
exec sleep 120
"""


def _killed_by_the_signal_while_starting(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path,
                                         pin: Sequence[str]) -> None:
    script = requeue_script(tmp_path, data, "srun", nodes=1, procs=1)
    trainer = stand_in_trainer(tmp_path, DYING_TRAINER)
    job_id, log = submit_script(slurm_cluster, script, tmp_path / "run", f"PYTHON={trainer}")
    wait_for("the batch script to decide", lambda: re.search(r"training exited|requeueing", log()), 100)
    assert "requeueing job" in log(), log()[-3000:]
    release_requeued(slurm_cluster, job_id)
    assert slurm_cluster.wait_finished(job_id, runs=2)["State"] == "COMPLETED"
    assert run_states(slurm_cluster, job_id) == ["REQUEUED", "COMPLETED"]


LAUNCHERS = ("srun", "mpi", "launch")
SIGNAL_TEST = "test_time_limit_signal_checkpoints_requeues_and_resumes"
WAVES: Sequence[Wave] = ({
    **{f"{SIGNAL_TEST}[{launcher}]": (partial(_time_limit_signal, launcher), None) for launcher in LAUNCHERS},
    "test_scontrol_requeue_checkpoints_and_resumes": (_scontrol_requeue, None),
    "test_submitit_preemption_requeues_and_resumes": (_submitit_preemption, None),
    "test_time_limit_signal_during_start_up_is_not_lost": (_signal_during_start_up, None),
    "test_a_run_that_finishes_after_the_signal_is_not_requeued": (_finishes_after_the_signal, None),
    "test_a_trainer_killed_by_the_signal_while_starting_is_requeued": (_killed_by_the_signal_while_starting, None),
},)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path):
    with pytest.MonkeyPatch.context() as env:  # submitit calls sbatch/sacct itself, from this process
        for key in ("SLURM_CONF", "PATH"):
            env.setenv(key, slurm_cluster.env[key])
        env.setenv("OMP_NUM_THREADS", "1")
        yield Scenarios(request, slurm_cluster, data, WAVES, at_once=4)  # 4: the trainers share 2 cores


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_time_limit_signal_checkpoints_requeues_and_resumes(scenarios: Scenarios, request: pytest.FixtureRequest,
                                                            launcher: str) -> None:
    """USR2 to the batch script, passed on its launcher's way: checkpoint, requeue, resume exactly."""
    scenarios.outcome(request.node.name)


def test_scontrol_requeue_checkpoints_and_resumes(scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """SIGTERM to every process (torchrun, 2 processes): checkpoint, requeue, resume exactly."""
    scenarios.outcome(request.node.name)


def test_submitit_preemption_requeues_and_resumes(scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """submitit's USR2: the task checkpoints, submitit requeues it, and it resumes exactly."""
    scenarios.outcome(request.node.name)


def test_time_limit_signal_during_start_up_is_not_lost(scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """USR2 before torchrun has started its workers: they stop at their first safe step."""
    scenarios.outcome(request.node.name)


def test_a_run_that_finishes_after_the_signal_is_not_requeued(scenarios: Scenarios,
                                                              request: pytest.FixtureRequest) -> None:
    """Trainers that exit 0 after the signal: the job completes once, no requeue."""
    scenarios.outcome(request.node.name)


def test_a_trainer_killed_by_the_signal_while_starting_is_requeued(scenarios: Scenarios,
                                                                   request: pytest.FixtureRequest) -> None:
    """A trainer the signal reached before its handler was in place dies of it: the run has not
    finished, so the job is requeued (it once ended FAILED and the time was lost)."""
    scenarios.outcome(request.node.name)
