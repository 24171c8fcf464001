"""What the requeue tests check beyond the scenarios' own helpers (hpc_imagenet/slurm/localcluster/scenarios/
jobs.py): that a preempted run resumed exactly where it stopped, every step trained once, read
back from the run's TensorBoard events."""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import List

import pytest

from hpc_imagenet.slurm.localcluster.scenarios.jobs import EPOCHS


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
