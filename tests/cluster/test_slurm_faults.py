"""Chaos on the test cluster: a node's network gone in mid-step, a full disk while a checkpoint is
written, a slurmd killed, fewer nodes after a requeue. Each test injects the fault into a tiny real
job (resnet18, 32 px, gloo over the nodes' veths) and checks what follows: the job recovers on its
own (the generated files restart a failed step, see tests/cluster/test_slurm_recovery.py for killed ranks,
node failures and stopped ranks), or it ends with one line and the last good checkpoint intact
and a user's restart (the same batch file and run folder: ``--resume auto``) finishes the run.

Each test measures what RESULTS.md's fault table shows: recovered without a user, time to detect
(fault injected -> the failure reported), time from the fault to training again, steps trained
twice (progress lines printed for the same step in more than one run: the work since the last
checkpoint), their seconds, and checkpoints lost. With
HPC_IMAGENET_FAULT_RECORDS set (``python -m results.bench faults`` sets it) each appends one
harness record there; a plain ``pytest`` run writes nothing.

The SLURM scenarios run at once, in waves on the session's cluster (tests/cluster/scenarios.py): much
of a fault's time is waiting (the collective timeout, a job's end, a slurmd coming back) while the
others train. Each scenario's jobs are kept off the nodes another scenario's fault reaches (``WAVES``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Sequence

import pytest

from tests.helpers import explain, python, read_run, script
from tests.cluster.faults import (AT_ONCE, INTERVAL, PERIODIC, PROGRESS, checkpoint_at, completed_in_one_allocation,
                                  record_fault, seconds_lost, steps_trained_twice, training_again,
                                  wait_for_periodic_checkpoint)
from tests.cluster.requeue import (EPOCHS, TRAIN, release_requeued, requeue_script, run_states, submit_script,
                                   wait_for_progress)
from tests.cluster.scenarios import Scenarios, Wave
from tests.slurm_cluster import SlurmCluster, wait_for

COLLECTIVE_TIMEOUT_S = 30  # --collective-timeout of the network test: the bound on a lost peer


def _mount_tmpfs(where: Path, size_bytes: int) -> None:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")


def test_disk_full_while_saving_keeps_the_last_good_checkpoint(jpeg_data, tmp_path: Path) -> None:
    """The run folder is a tmpfs with room for the files of epoch 0 plus half a checkpoint: the
    epoch-1 save cannot complete. One line, exit 2, and the epoch-0 checkpoint still loads."""
    train = [*TRAIN, "--image-size", "32", "-a", "resnet18", "-b", "8", "--workers", "0", "--steps-per-epoch", "3"]
    first = tmp_path / "first"
    done = python(script("imagenet_nd.py"), *train, "--epochs", "1", "--log-dir", first, jpeg_data)
    assert done.returncode == 0, explain(done)
    used = sum(f.stat().st_size for f in first.rglob("*") if f.is_file())
    size = (first / "checkpoint.pth.tar").stat().st_size
    full = tmp_path / "full"
    _mount_tmpfs(full, used + size // 2)
    try:
        shutil.copytree(first, full, dirs_exist_ok=True)
        failed = python(script("imagenet_nd.py"), *train, "--epochs", "2", "--resume", "auto", "--log-dir", full,
                        jpeg_data)
        errors = [line for line in failed.stderr.splitlines() if line.strip()]
        assert failed.returncode == 2, explain(failed)
        assert len(errors) == 1 and "No space left on device" in errors[0], explain(failed)
        assert errors[0].startswith("error: cannot write checkpoint") and "previous one is kept" in errors[0]
        assert checkpoint_at(full) == (1, 0), "the epoch-0 checkpoint survives the failed save"
        assert not list(full.glob(".*.tmp")), "a failed save leaves no temp file behind"
        shutil.copytree(full, tmp_path / "freed")  # space freed: the user moves the run folder
    finally:
        subprocess.run(["umount", str(full)], check=False)
    again = python(script("imagenet_nd.py"), *train, "--epochs", "2", "--resume", "auto", "--log-dir",
                   tmp_path / "freed", jpeg_data)
    assert again.returncode == 0, explain(again)
    assert [e["epoch"] for e in read_run(tmp_path / "freed")["epochs"]] == [0, 1]
    twice = steps_trained_twice(failed.stdout, again.stdout)
    assert twice == 3, "the epoch trained before the failed save runs again"
    # not recovered on its own: the space must be freed (exit 2 is never restarted in place)
    record_fault("disk full while saving a checkpoint", "none", 1, True, None, twice, 0, recovered=False)


def _network_loss(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """Rank 1's node's veth goes down in mid-step: no RST, no FIN, the peers just stop answering. Within
    --collective-timeout one line names it; once the link is back the batch loop restarts the step."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=2, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir,
                                f"EXTRA_ARGS=--collective-timeout={COLLECTIVE_TIMEOUT_S} {PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    hosts = slurm_cluster.run(["scontrol", "show", "hostnames", slurm_cluster.job_state(job_id)["NodeList"]])
    lost = hosts.stdout.split()[1]  # rank 1's node
    veth = slurm_cluster.layout.veth(int(lost.removeprefix("node")))
    since = len(log())
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    t0 = time.monotonic()
    try:
        error = wait_for("rank 0's one-line error", lambda: re.search(r"^error: .*$", log()[since:], re.M),
                         COLLECTIVE_TIMEOUT_S + 90, interval=0.1)
        detect = time.monotonic() - t0
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    assert detect < COLLECTIVE_TIMEOUT_S + 30, f"detected after {detect:.0f}s; the timeout is {COLLECTIVE_TIMEOUT_S}s"
    assert lost in error.group(0) and "Traceback" not in log(), log()[-3000:]
    recover = training_again(log, since, t0)
    completed_in_one_allocation(slurm_cluster, job_id, log, run_dir)
    assert re.search(r"resumed from \S+: epoch 1, step [1-9]", log()[since:]), log()[-3000:]
    twice = steps_trained_twice(log())
    assert twice <= INTERVAL, f"{twice} steps trained twice; at most one interval ({INTERVAL}) may be lost"
    record_fault("network loss (veth down mid-step)", "srun", 2, True, detect, twice, 0, recovered=True,
                 recover_s=recover, seconds_lost=seconds_lost(log(), since), error=error.group(0)[:300])


def _sample_ranges(log: str, samples_per_epoch: int) -> dict:
    """epoch -> sorted [first, end) global sample ranges of every printed step (any world size)."""
    ranges: dict = {}
    for e, s, n in PROGRESS.findall(log):
        batch = samples_per_epoch // int(n)
        ranges.setdefault(int(e), []).append(((int(s) - 1) * batch, int(s) * batch))
    return {e: sorted(r) for e, r in ranges.items()}


def _fewer_nodes(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """4 nodes, preempted in epoch 1 at step 2 of 6 (global batch 32); the requeued run gets 2 nodes
    (global batch 16) and must start at step 4 of 12: sample 64, nothing skipped, nothing twice."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=4, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, sbatch_args=pin)
    wait_for_progress(log, 1, 2)
    slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job_id])
    # what an operator types for a pending job: min-max nodes (2 alone leaves the maximum at 4), tasks
    release_requeued(slurm_cluster, job_id, "NumNodes=2-2", "NumTasks=2")
    row = slurm_cluster.wait_finished(job_id, timeout=300, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(slurm_cluster, job_id) == ["REQUEUED", "COMPLETED"]
    record = read_run(run_dir)
    assert record["dist"]["world_size"] == 2 and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
    saved = re.search(r"checkpoint saved at epoch 1 step (\d+)", log())
    moved = re.search(r"global batch 32 -> 16: resuming at sample (\d+) of epoch 1 \(step (\d+)/12\)", log())
    assert saved and moved, log()[-3000:]
    assert int(moved.group(1)) == 32 * int(saved.group(1)) and int(moved.group(2)) == 2 * int(saved.group(1))
    for epoch, ranges in _sample_ranges(log(), 192).items():
        tiles = [start for start, _ in ranges] == [0, *[end for _, end in ranges[:-1]]]
        assert tiles and ranges[-1][1] == 192, f"epoch {epoch}: samples skipped or trained twice: {ranges}"
    twice = sum(b[0] < a[1] for r in _sample_ranges(log(), 192).values() for a, b in zip(r, r[1:]))
    record_fault("fewer nodes after a requeue (4 -> 2)", "srun", 4, True, None, twice, 0)


def _slurmd_killed(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """slurmd only launches and watches job steps: the trainers (under slurmstepd) train on, the job
    completes, and the restarted slurmd takes the node back before slurmctld calls it down."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=2, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, sbatch_args=pin)
    wait_for_progress(log, 1, 3)
    node = slurm_cluster.run(["scontrol", "show", "hostnames", slurm_cluster.job_state(job_id)["NodeList"]])
    victim = node.stdout.split()[1]
    slurm_cluster.kill_slurmd(victim)
    try:  # the job's end needs the node's slurmd (it runs the clean-up): restart it once training ended
        wait_for("the training to end", lambda: "training exited with status" in log(), 240)
    finally:
        slurm_cluster.start_slurmd(victim)
    row = slurm_cluster.wait_finished(job_id, timeout=120)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    record = read_run(run_dir)
    assert record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
    # the node is back (the whole cluster idle is checked after each wave)
    slurm_cluster.wait_node_idle(victim)
    twice = steps_trained_twice(log())
    assert twice == 0
    record_fault("kill -9 of one slurmd", "srun", 2, True, None, twice, 0)


# test name -> (scenario, the nodes its jobs are pinned to). Wave 1: the network loss takes node2's veth
# down (node1 + node2: rank 1 on node2, where no other job runs); the killed slurmd is node4's (node3 +
# node4: no other job there launches a step or ends). Wave 2, alone: the 4-node job needs every node up
# and reachable, and its release waits for no node to be completing, which the killed slurmd's job may
# stay for up to SlurmdTimeout.
WAVES: Sequence[Wave] = (
    {"test_network_loss_is_named_within_the_collective_timeout_and_the_step_restarts": (_network_loss, "node1,node2"),
     "test_kill_9_of_a_slurmd_leaves_the_running_job_alone": (_slurmd_killed, "node3,node4")},
    {"test_fewer_nodes_after_a_requeue_carry_the_global_sample_position": (_fewer_nodes, None)},
)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path) -> Scenarios:
    return Scenarios(request, slurm_cluster, data, WAVES, at_once=AT_ONCE)


@pytest.mark.slurm
def test_network_loss_is_named_within_the_collective_timeout_and_the_step_restarts(
        scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """A node's network lost in mid-step: named within --collective-timeout, the step restarts (see _network_loss)."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_fewer_nodes_after_a_requeue_carry_the_global_sample_position(scenarios: Scenarios,
                                                                       request: pytest.FixtureRequest) -> None:
    """4 -> 2 nodes at a requeue: nothing skipped, nothing trained twice (see _fewer_nodes)."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_kill_9_of_a_slurmd_leaves_the_running_job_alone(scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """The job completes and the restarted slurmd takes its node back (see _slurmd_killed)."""
    scenarios.outcome(request.node.name)
