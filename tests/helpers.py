"""Shared helpers for tests that run the real scripts as subprocesses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from launch.environment import free_port  # noqa: F401  (tests import it from here)

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
SCRIPTS = REPO / "imagenet"

# Small enough for 2 CPU cores: resnet18 at 32x32, batch 8, no loader workers.
TINY = ["-a", "resnet18", "--image-size", "32", "-b", "8", "--workers", "0", "--dist-backend", "gloo"]


def script(name: str) -> str:
    return str(SCRIPTS / name)


def child_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "LOCAL_", "WORLD_SIZE", "MASTER_", "SLURM_", "OMPI_", "PMI", "PMIX",
                                "TORCHELASTIC", "GROUP_"))}
    env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra})
    return env


def run(args: Sequence[str], timeout: float = 300, env: Optional[Dict[str, str]] = None,
        cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout)


def python(*args, **kw) -> subprocess.CompletedProcess:
    return run([PYTHON, *args], **kw)



def read_run(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


def event_files(run_dir: Path) -> List[Path]:
    return sorted(Path(run_dir).rglob("events.out.tfevents.*"))


def tb_scalars(run_dir: Path) -> Dict[str, list]:
    """tag -> [(step, value)] read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
