"""Chaos on the test cluster: a trainer rank killed with SIGKILL, a node's network gone in
mid-step, a full disk while a checkpoint is written. Each test injects the fault into a tiny real
job (resnet18, 32 px, gloo over the nodes' veths), checks that the job ends within a stated bound
with the last good checkpoint intact, restarts it the way a user would (the same batch file and
run folder: ``--resume auto``) and checks that the run then finishes.

Each test measures what RESULTS.md's fault table shows: survived, time to detect (fault injected
-> the job, or process, ended), steps trained twice (progress lines printed for the same step in
more than one run: the work since the last checkpoint) and checkpoints lost. With
HPC_IMAGENET_FAULT_RECORDS set (``python -m results.bench faults`` sets it) each appends one
harness record there; a plain ``pytest`` run writes nothing.

The SLURM scenarios run at once, in two waves on the session's cluster (tests/cluster/scenarios.py):
much of a fault's time is waiting (the dist-timeout, a job's end, a slurmd coming back) while the
others train. Each scenario's jobs are pinned to nodes no other scenario's fault reaches (``WAVES``).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import pytest
import torch

from tests.helpers import explain, python, read_run, script
from tests.cluster.requeue import (EPOCHS, TRAIN, release_requeued, requeue_script, run_states, submit_script,
                                   wait_for_progress)
from tests.cluster.scenarios import Scenarios, Wave
from tests.slurm_cluster import SlurmCluster, wait_for

RECORDS_ENV = "HPC_IMAGENET_FAULT_RECORDS"  # where to append the records (unset: none)
SWEEP_ENV = "HPC_IMAGENET_FAULT_SWEEP"
DIST_TIMEOUT_S = 30  # --dist-timeout of the network test: the bound on a lost peer
KILLED_BOUND_S = 60  # a killed rank's peers see its sockets close: far less than any timeout
PROGRESS = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]")


def record_fault(fault: str, launcher: str, nodes: int, survived: bool, detect_s: Optional[float],
                 twice: int, lost: int, **extra) -> None:
    """Append this test's measurement to $HPC_IMAGENET_FAULT_RECORDS (see results/report/faults.py)."""
    path = os.environ.get(RECORDS_ENV)
    if not path:
        return
    from imagenet import sysinfo
    from results.core import records

    metrics = {"survived": int(survived), "steps_trained_twice": twice, "checkpoints_lost": lost}
    if detect_s is not None:
        metrics["detect_s"] = round(detect_s, 2)
    rec = records.make_record("fault", os.environ.get(SWEEP_ENV, "pytest"),
                              {"fault": fault, "launcher": launcher, "nodes": nodes}, metrics,
                              sysinfo.collect(nodes=nodes), command=f"pytest {Path(__file__).name}", **extra)
    records.append(Path(path), rec)


def steps_trained_twice(*logs: str) -> int:
    """Steps whose progress line rank 0 printed more than once over all runs (-p 1 prints each)."""
    seen = Counter((int(e), int(s)) for log in logs for e, s, _ in PROGRESS.findall(log))
    return sum(n - 1 for n in seen.values() if n > 1)


def checkpoint_at(run_dir: Path) -> tuple:
    """(epoch, step) of the run folder's checkpoint; raises if it does not load."""
    ckpt = torch.load(run_dir / "checkpoint.pth.tar", weights_only=True)
    return int(ckpt["epoch"]), int(ckpt["step_in_epoch"])


def _ended(cluster: SlurmCluster, job_id: str) -> Callable[[], bool]:
    return lambda: cluster.job_state(job_id).get("JobState") not in ("RUNNING", "PENDING", "CONFIGURING")


def _job_pids(cluster: SlurmCluster, job_id: str, node_id: int, rank: Optional[int] = None) -> List[int]:
    """Python processes of CLUSTER's JOB, training step on node NODE_ID (the launcher agent and the
    trainers; with RANK, only the srun-started trainer whose SLURM_PROCID is RANK). Job ids repeat
    across the test clusters on this machine: SLURM_CONF tells ours apart."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            if b"python" not in cmd[0].rsplit(b"/", 1)[-1] or not any(b"imagenet_ddp.py" in c for c in cmd):
                continue
            env = dict(v.split("=", 1) for v in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in v)
        except OSError:
            continue
        if env.get("SLURM_CONF") != str(cluster.conf):
            continue
        if env.get("SLURM_JOB_ID") == job_id and env.get("SLURM_NODEID") == str(node_id) and (
                rank is None or env.get("SLURM_PROCID") == str(rank)):
            pids.append(int(entry.name))
    return pids


def _finish_again(cluster: SlurmCluster, script_path: Path, run_dir: Path, pin: Sequence[str]) -> str:
    """Submit the same batch file on the same run folder (what a user does after a failed job)."""
    job_id, log = submit_script(cluster, script_path, run_dir, sbatch_args=pin)
    row = cluster.wait_finished(job_id, timeout=300)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    record = read_run(run_dir)
    assert record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
    return log()


KILLS = {  # fault: (launcher, processes per node, what to kill on the second node)
    "kill -9 of one trainer rank": ("srun", 1, 1),
    "kill -9 of a node's process tree (torchrun agent + workers)": ("torchrun", 2, None),
}


def _kill_9(fault: str, slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    launcher, procs, rank = KILLS[fault]
    script_path = requeue_script(tmp_path, data, launcher, nodes=2, procs=procs)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, sbatch_args=pin)
    wait_for_progress(log, 1, 3)
    expected = 1 if rank is not None else 1 + procs  # torchrun: the agent and its workers

    def second_node() -> Optional[List[int]]:
        pids = _job_pids(slurm_cluster, job_id, 1, rank)
        return pids if len(pids) >= expected else None

    pids = wait_for("the second node's processes", second_node, 30)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(f"job {job_id} to end after the kill", _ended(slurm_cluster, job_id), KILLED_BOUND_S, interval=0.1)
    detect = time.monotonic() - t0
    assert slurm_cluster.wait_finished(job_id)["State"] == "FAILED"
    assert checkpoint_at(run_dir) == (1, 0), "the end-of-epoch-0 checkpoint is the last good one"
    first = log()
    second = _finish_again(slurm_cluster, script_path, run_dir, pin)
    assert re.search(r"resumed from \S+: epoch 1, step 0", second), second[-3000:]
    twice = steps_trained_twice(first, second)
    assert 3 <= twice < 2 * 12 // procs, "only the steps after the last checkpoint (epoch 1) run again"
    record_fault(fault, launcher, 2, True, detect, twice, 0, killed=len(pids))


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
    record_fault("disk full while saving a checkpoint", "none", 1, True, None, twice, 0)


def _network_loss(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """Rank 1's node's veth goes down in mid-step: no RST, no FIN, the peers just stop answering."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=2, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, f"EXTRA_ARGS=--dist-timeout={DIST_TIMEOUT_S}",
                                sbatch_args=pin)
    wait_for_progress(log, 1, 3)
    hosts = slurm_cluster.run(["scontrol", "show", "hostnames", slurm_cluster.job_state(job_id)["NodeList"]])
    lost = hosts.stdout.split()[1]  # rank 1's node
    veth = slurm_cluster.layout.veth(int(lost.removeprefix("node")))
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    t0 = time.monotonic()
    try:
        error = wait_for("rank 0's one-line error", lambda: re.search(r"^error: .*$", log(), re.M),
                         DIST_TIMEOUT_S + 30, interval=0.1)
        detect = time.monotonic() - t0
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    assert detect < DIST_TIMEOUT_S + 15, f"detected after {detect:.0f}s; --dist-timeout is {DIST_TIMEOUT_S}s"
    assert lost in error.group(0) and "Traceback" not in log(), log()[-3000:]
    wait_for(f"job {job_id} to end", _ended(slurm_cluster, job_id), 120, interval=0.2)
    assert checkpoint_at(run_dir) == (1, 0), "the end-of-epoch-0 checkpoint is the last good one"
    first = log()
    second = _finish_again(slurm_cluster, script_path, run_dir, pin)
    assert re.search(r"resumed from \S+: epoch 1, step 0", second), second[-3000:]
    twice = steps_trained_twice(first, second)
    record_fault("network loss (veth down mid-step)", "srun", 2, True, detect, twice, 0,
                 error=error.group(0)[:300])


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
    # the node is back (the whole cluster idle is checked after each wave); the job may stay COMPLETING
    # until slurmctld hears from the restarted slurmd, which a loaded machine can delay up to
    # SlurmdTimeout (120 s) and beyond
    wait_for(f"{victim} to be idle again", lambda: _node_state(slurm_cluster, victim) == "idle", 300)
    twice = steps_trained_twice(log())
    assert twice == 0
    record_fault("kill -9 of one slurmd", "srun", 2, True, None, twice, 0)


def _node_state(cluster: SlurmCluster, node: str) -> str:
    return cluster.run(["sinfo", "-h", "-n", node, "-o", "%T"], check=False).stdout.strip()


KILL_TEST = "test_kill_9_ends_the_job_and_the_restart_resumes"
# test name -> (scenario, the nodes its jobs are pinned to). Wave 1: the two kills hit only their own
# job's processes (node1 + node3); the network loss takes node4's veth down (node3 + node4: no other
# job on node4); the killed slurmd is node2's (node1 + node2: no other job launches a step there).
# Wave 2: the 4-node job needs every node, and its requeued run may land on any two.
WAVES: Sequence[Wave] = (
    {**{f"{KILL_TEST}[{fault}]": (partial(_kill_9, fault), "node1,node3") for fault in KILLS},
     "test_network_loss_ends_the_job_within_the_dist_timeout_naming_the_peer": (_network_loss, "node3,node4"),
     "test_kill_9_of_a_slurmd_leaves_the_running_job_alone": (_slurmd_killed, "node1,node2")},
    {"test_fewer_nodes_after_a_requeue_carry_the_global_sample_position": (_fewer_nodes, None)},
)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path) -> Scenarios:
    return Scenarios(request, slurm_cluster, data, WAVES)


@pytest.mark.slurm
@pytest.mark.parametrize("fault", list(KILLS))
def test_kill_9_ends_the_job_and_the_restart_resumes(scenarios: Scenarios, request: pytest.FixtureRequest,
                                                     fault: str) -> None:
    """The job fails within KILLED_BOUND_S, the epoch-0 checkpoint is the last good one, and the
    same batch file resumes at epoch 1 (see _kill_9)."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_network_loss_ends_the_job_within_the_dist_timeout_naming_the_peer(scenarios: Scenarios,
                                                                           request: pytest.FixtureRequest) -> None:
    """Rank 0 names the lost peer within --dist-timeout, the job ends and the restart resumes (see _network_loss)."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_fewer_nodes_after_a_requeue_carry_the_global_sample_position(scenarios: Scenarios,
                                                                       request: pytest.FixtureRequest) -> None:
    """4 -> 2 nodes at a requeue: nothing skipped, nothing trained twice (see _fewer_nodes)."""
    scenarios.outcome(request.node.name)


@pytest.mark.slurm
def test_kill_9_of_a_slurmd_leaves_the_running_job_alone(scenarios: Scenarios,
                                                         request: pytest.FixtureRequest) -> None:
    """The job completes and the restarted slurmd takes its node back (see _slurmd_killed)."""
    scenarios.outcome(request.node.name)
