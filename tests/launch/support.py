"""Shared pieces of the launcher tests: the tiny CPU training command, a launcher-free environment,
running commands with a deadline, checking a finished run folder, and hpc_imagenet.launch.manual's printed
commands. (Helpers only: the demo dataset fixture is in conftest.py.)"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hpc_imagenet.launch import manual
from tests.helpers import BIN, REPO, TINY_ARCH

# Variables of any launcher: the tests' children must not inherit a job they are not part of.
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "PRTE_", "MPI_LOCAL", "TORCHELASTIC_", "GROUP_",
                     "ROLE_", "LAUNCH_MPI")
LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"}


def clean_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **extra)
    return env


def printed(*argv: str) -> str:
    """What ``python -m hpc_imagenet.launch.manual ARGV`` prints."""
    return manual.render(manual.build_parser().parse_args(list(argv)))


def commands(text: str) -> List[str]:
    """The command lines of hpc_imagenet.launch.manual's output (its # comments left out)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def train_args(run_dir: Path, data: Path) -> List[str]:
    """The smallest real training: the tests' small model on 32x32 images, 3 steps, 2 validation batches."""
    return ["-a", TINY_ARCH, "--image-size", "32", "-b", "8", "--epochs", "1", "--steps-per-epoch", "3",
            "--val-steps", "2", "--workers", "0", "--dist-backend", "gloo", "--seed", "0",
            "--dist-timeout", "120", "--log-dir", str(run_dir), str(data)]


class Job:
    """A command started in its own process group, so a stuck one can be killed with its children."""

    def __init__(self, cmd, env: Dict[str, str], log: Path, shell: bool = False):
        self.log_path = log
        self.handle = open(log, "wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, shell=shell, stdout=self.handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, deadline: float) -> Optional[int]:
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.handle.close()
                return code
            time.sleep(0.2)
        return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.handle.close()

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def run_jobs(jobs: Sequence[Job], timeout_s: float) -> List[Optional[int]]:
    """Wait for every job until the deadline; kill what is still running. None = timed out."""
    deadline = time.monotonic() + timeout_s
    try:
        return [job.wait(deadline) for job in jobs]
    finally:
        for job in jobs:
            job.kill()


def wait_for_port(port: int, timeout_s: float, job: Job) -> None:
    """Poll until something listens on 127.0.0.1:PORT (the master is up), failing fast if JOB died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if job.proc.poll() is not None:
            raise AssertionError(f"the master exited early ({job.proc.returncode}):\n{job.output[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listened on port {port} within {timeout_s}s:\n{job.output[-3000:]}")


def assert_trained(run_dir: Path, world_size: int, environment: str) -> dict:
    """Rank 0 finished, recorded the right layout, and was the only one to write TensorBoard."""
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished"
    assert record["dist"]["world_size"] == world_size
    assert record["dist"]["environment"] == environment
    assert record["epochs"] and record["epochs"][0]["train_loss"] > 0
    events = sorted(run_dir.rglob("events.out.tfevents.*"))
    assert len(events) == 1, f"only rank 0 may write TensorBoard, found {events}"
    return record
