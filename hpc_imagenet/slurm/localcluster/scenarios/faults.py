"""Chaos on the local cluster: a node's network gone in mid-step, a slurmd killed, fewer nodes after
a requeue, and (on this host, no cluster needed) a full disk while a checkpoint is written. Each
scenario injects its fault into a tiny real job (a small ShuffleNet, 32 px, gloo over the nodes' veths) and
checks what follows: the job recovers on its own (the generated batch files restart a failed
step; :mod:`hpc_imagenet.slurm.localcluster.scenarios.recovery` has killed ranks, node failures and stopped
ranks), or it ends with one line and the last good checkpoint intact and a user's restart (the
same batch file and run folder: ``--resume auto``) finishes the run. Each returns the
:class:`~hpc_imagenet.slurm.localcluster.scenarios.measure.Measurement` the fault table shows.

A scenario is ``(cluster, data, folder, pin) -> Measurement``: PIN holds the sbatch options that
keep its jobs off the nodes another scenario's fault reaches (:mod:`.waves`).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.commands import ClusterUnavailable, wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, REPO, TRAIN, release_requeued, requeue_script,
                                                            run_states, submit_script, wait_for_progress)
from hpc_imagenet.slurm.localcluster.scenarios.measure import (INTERVAL, PERIODIC, PROGRESS, Measurement, check,
                                                               checkpoint_at, completed_in_one_allocation, read_run,
                                                               seconds_lost, steps_trained_twice, training_again,
                                                               wait_for_periodic_checkpoint)

COLLECTIVE_TIMEOUT_S = 30  # --collective-timeout of the network scenario: the bound on a lost peer
SAMPLES_PER_EPOCH = 192  # scenario_data's training images


def network_loss(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """Rank 1's node's veth goes down in mid-step: no RST, no FIN, the peers just stop answering. Within
    --collective-timeout one line names it; once the link is back the batch loop restarts the step."""
    script_path = requeue_script(folder, data, "srun", nodes=2, procs=1)
    run_dir = folder / "run"
    job_id, log = submit_script(cluster, script_path, run_dir,
                                f"EXTRA_ARGS=--collective-timeout={COLLECTIVE_TIMEOUT_S} {PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    lost = cluster.job_nodes(job_id)[1]  # rank 1's node
    since = len(log())
    cluster.set_network(lost, up=False)
    started = time.monotonic()
    try:
        error = wait_for("rank 0's one-line error", lambda: re.search(r"^error: .*$", log()[since:], re.M),
                         COLLECTIVE_TIMEOUT_S + 90, interval=0.1)
        detect = time.monotonic() - started
    finally:
        cluster.set_network(lost, up=True)
    check(detect < COLLECTIVE_TIMEOUT_S + 30, f"detected after {detect:.0f}s; the timeout is {COLLECTIVE_TIMEOUT_S}s")
    check(lost in error.group(0) and "Traceback" not in log(), log()[-3000:])
    recover = training_again(log, since, started)
    completed_in_one_allocation(cluster, job_id, log, run_dir)
    check(re.search(r"resumed from \S+: epoch 1, step [1-9]", log()[since:]), log()[-3000:])
    twice = steps_trained_twice(log())
    check(twice <= INTERVAL, f"{twice} steps trained twice; at most one interval ({INTERVAL}) may be lost")
    return Measurement("network loss (veth down mid-step)", "srun", 2, True, twice, detect_s=detect, recovered=True,
                       recover_s=recover, seconds_lost=seconds_lost(log(), since),
                       extra={"error": error.group(0)[:300]})


def _sample_ranges(log: str) -> dict:
    """epoch -> sorted [first, end) global sample ranges of every printed step (any world size)."""
    ranges: dict = {}
    for epoch, step, steps in PROGRESS.findall(log):
        batch = SAMPLES_PER_EPOCH // int(steps)
        ranges.setdefault(int(epoch), []).append(((int(step) - 1) * batch, int(step) * batch))
    return {epoch: sorted(found) for epoch, found in ranges.items()}


def fewer_nodes(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """4 nodes of batch 2 (global batch 8, 24 steps an epoch), preempted once epoch 0 is under way; the
    requeued run gets 2 nodes (global batch 4, 48 steps) and must start at twice the saved step: the
    same sample, nothing skipped, nothing twice. The epochs are long in steps because the signal
    lands a few tenths of a second after it is sent (the log's polling, scancel's round trip): with 6
    steps an epoch it could land at the epoch's end, where there is no position to carry."""
    script_path = requeue_script(folder, data, "srun", nodes=4, procs=1, batch=2)
    run_dir = folder / "run"
    job_id, log = submit_script(cluster, script_path, run_dir, sbatch_args=pin)
    wait_for_progress(log, 0, 2)
    client.signal(job_id, "USR2", env=cluster.env)
    # what an operator types for a pending job: min-max nodes (2 alone leaves the maximum at 4), tasks
    release_requeued(cluster, job_id, "NumNodes=2-2", "NumTasks=2")
    row = cluster.wait_finished(job_id, timeout=300, runs=2)
    text = log()  # the job is over: its log is read once
    check(row["State"] == "COMPLETED", f"{row}\n{text[-3000:]}")
    check(run_states(cluster, job_id) == ["REQUEUED", "COMPLETED"], run_states(cluster, job_id))
    record = read_run(run_dir)
    check(record["dist"]["world_size"] == 2 and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS)), record)
    saved = re.search(r"checkpoint saved at epoch (\d+) step ([1-9]\d*)", text)
    moved = re.search(r"global batch 8 -> 4: resuming at sample (\d+) of epoch (\d+) \(step (\d+)/48\)", text)
    check(saved and moved, text[-3000:])
    saved_epoch, saved_step = int(saved.group(1)), int(saved.group(2))
    resumed = (int(moved.group(1)), int(moved.group(2)), int(moved.group(3)))  # sample, epoch, step
    check(resumed == (8 * saved_step, saved_epoch, 2 * saved_step), moved.group(0))
    sample_ranges = _sample_ranges(text)
    for epoch, ranges in sample_ranges.items():
        tiles = [start for start, _ in ranges] == [0, *[end for _, end in ranges[:-1]]]
        check(tiles and ranges[-1][1] == SAMPLES_PER_EPOCH,
              f"epoch {epoch}: samples skipped or trained twice: {ranges}")
    twice = sum(later[0] < earlier[1] for ranges in sample_ranges.values()
                for earlier, later in zip(ranges, ranges[1:]))
    return Measurement("fewer nodes after a requeue (4 -> 2)", "srun", 4, True, twice)


def slurmd_killed(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """slurmd only launches and watches job steps: the trainers (under slurmstepd) train on, the job
    completes, and the restarted slurmd takes the node back before slurmctld calls it down."""
    script_path = requeue_script(folder, data, "srun", nodes=2, procs=1)
    run_dir = folder / "run"
    job_id, log = submit_script(cluster, script_path, run_dir, sbatch_args=pin)
    wait_for_progress(log, 1, 3)
    victim = cluster.job_nodes(job_id)[1]
    cluster.kill_slurmd(victim)
    try:  # the job's end needs the node's slurmd (it runs the clean-up): restart it once training ended
        wait_for("the training to end", lambda: "training exited with status" in log(), 240)
    finally:
        cluster.start_slurmd(victim)
    row = cluster.wait_finished(job_id, timeout=120)
    check(row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}")
    record = read_run(run_dir)
    check(record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS)), record)
    cluster.wait_node_idle(victim)  # the node is back (the whole cluster idle is checked after each wave)
    twice = steps_trained_twice(log())
    check(twice == 0, f"{twice} steps trained twice")
    return Measurement("kill -9 of one slurmd", "srun", 2, True, twice)


def _train_here(*args: object) -> subprocess.CompletedProcess:
    """imagenet_nd.py on this host (one process, no launcher), as a user runs it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "RANK", "WORLD_SIZE"))}
    return subprocess.run([sys.executable, str(REPO / "imagenet" / "imagenet_nd.py"), *map(str, args)], cwd=REPO,
                          env={**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)


def _explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def _mount_tmpfs(where: Path, size_bytes: int) -> None:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise ClusterUnavailable(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")


def disk_full(cluster: Optional[SlurmCluster], data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """The run folder is a tmpfs with room for the files of epoch 0 plus half a checkpoint: the
    epoch-1 save cannot complete. One line, exit 2, and the epoch-0 checkpoint still loads. Runs on
    this host: CLUSTER and PIN are unused."""
    train = [*TRAIN, "-a", ARCH, "-b", "8", "--workers", "0", "--steps-per-epoch", "3"]
    first = folder / "first"
    done = _train_here(*train, "--epochs", "1", "--log-dir", first, data)
    check(done.returncode == 0, _explain(done))
    used = sum(path.stat().st_size for path in first.rglob("*") if path.is_file())
    size = (first / "checkpoint.pth.tar").stat().st_size
    full = folder / "full"
    _mount_tmpfs(full, used + size // 2)
    try:
        shutil.copytree(first, full, dirs_exist_ok=True)
        failed = _train_here(*train, "--epochs", "2", "--resume", "auto", "--log-dir", full, data)
        # warnings (a machine without the C region decoder prints one) are not the error
        errors = [line for line in failed.stderr.splitlines() if line.strip() and not line.startswith("WARNING:")]
        check(failed.returncode == 2, _explain(failed))
        check(len(errors) == 1 and "No space left on device" in errors[0], _explain(failed))
        check(errors[0].startswith("error: cannot write checkpoint") and "previous one is kept" in errors[0], errors)
        check(checkpoint_at(full) == (1, 0), "the epoch-0 checkpoint survives the failed save")
        check(not list(full.glob(".*.tmp")), "a failed save leaves no temp file behind")
        shutil.copytree(full, folder / "freed")  # space freed: the user moves the run folder
    finally:
        subprocess.run(["umount", str(full)], check=False)
    again = _train_here(*train, "--epochs", "2", "--resume", "auto", "--log-dir", folder / "freed", data)
    check(again.returncode == 0, _explain(again))
    check([e["epoch"] for e in read_run(folder / "freed")["epochs"]] == [0, 1], "both epochs recorded")
    twice = steps_trained_twice(failed.stdout, again.stdout)
    check(twice == 3, f"the epoch trained before the failed save runs again: {twice} steps twice, not 3")
    # not recovered on its own: the space must be freed (exit 2 is never restarted in place)
    return Measurement("disk full while saving a checkpoint", "none", 1, True, twice, recovered=False)
