"""What the requeue tests check beyond the scenarios' own helpers (hpc_imagenet/slurm/localcluster/scenarios/
jobs.py): that a preempted run resumed exactly where it stopped, every step trained once, read
back from the run's TensorBoard events or from a script's own trace; and the signal sent in mid-run."""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Callable, List

import pytest

from hpc_imagenet.slurm.localcluster import SlurmCluster, wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import EPOCHS, release_requeued, run_states


# the NGC-like image tier's tests (its own Python and torch 2.6, ~6 GB to build): make test-images sets the variable
IMAGE_TIER = [pytest.mark.slurm,
              pytest.mark.skipif(not os.environ.get("HPC_IMAGENET_TORCH_IMAGE"),
                                 reason="the NGC-like image tier: make test-images (HPC_IMAGENET_TORCH_IMAGE=1)")]

def logged_steps(run_dir: Path) -> List[int]:
    """Global steps of every Step/loss scalar in every events file of the run (all restarts)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            if any(v.tag == "Step/loss" for v in event.summary.value):
                steps.append(event.step)
    return steps


def assert_resumed_exactly(run_dir: Path, log: str) -> None:
    saved = re.search(r"checkpoint saved at epoch (\d+) step (\d+)", log)
    resumed = re.search(r"resumed from \S+: epoch (\d+), step (\d+)", log)
    assert saved and resumed, f"no preemption/resume in the log:\n{log[-3000:]}"
    assert saved.groups() == resumed.groups()
    assert_every_step_once(run_dir)


def assert_every_step_once(run_dir: Path) -> None:
    """The run finished all its epochs, and every step was trained exactly once over all its runs."""
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished", record["status"]
    assert [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
    steps = logged_steps(run_dir)
    repeated = [s for s, n in Counter(steps).items() if n > 1]
    assert not repeated, f"steps trained twice: {repeated}"
    per_epoch = len(steps) // EPOCHS
    assert sorted(steps) == list(range(1, EPOCHS * per_epoch + 1)), "steps missing"


def signal_in_mid_run(cluster: SlurmCluster, job_id: str, log: Callable[[], str], seen: str,
                      timeout: float = 300) -> str:
    """Once SEEN is in the batch log, the time-limit signal (USR2) to the batch script; the requeued job started at
    once; its second run ends COMPLETED after the first's REQUEUED. The batch log's text."""
    wait_for(f"{seen!r} in the batch log", lambda: seen in log(), timeout, interval=0.3)
    cluster.run(["scancel", "--batch", "--signal=USR2", job_id])
    release_requeued(cluster, job_id)
    row = cluster.wait_finished(job_id, timeout=timeout, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(cluster, job_id) == ["REQUEUED", "COMPLETED"]
    return log()


def assert_traced_once(trace: Path, ranks: int, steps: int, before_signal: int) -> None:
    """A script's --trace lines ("RANK STEP RUN"): every (rank, step) once over both runs, the first run at least
    BEFORE_SIGNAL steps a rank and the second some (the signal came in mid-run)."""
    lines = [line.split() for line in trace.read_text().splitlines()]
    trained = Counter((int(rank), int(step)) for rank, step, _ in lines)
    assert trained == Counter({(rank, step): 1 for rank in range(ranks) for step in range(steps)})
    runs = Counter(run for _, _, run in lines)
    assert runs["0"] >= ranks * before_signal and runs["1"] >= ranks, runs
