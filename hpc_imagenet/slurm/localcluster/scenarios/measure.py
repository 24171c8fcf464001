"""What a fault scenario checks and measures: its checks (which fail with ScenarioFailed, also
under ``python -O``), the measurement it returns for the fault table, the work a fault cost (steps
trained twice and their seconds), the time until training runs again, and finding a job's trainer
processes on a node."""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.commands import wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import EPOCHS, run_states

PROGRESS = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]")
PROGRESS_LINE = re.compile(r"^Epoch: \[(\d+)\]\[\s*(\d+)/\d+\].*?([\d.]+) img/s$", re.M)
RESUMED = re.compile(r"resumed from \S+: epoch (\d+), step (\d+)")
INTERVAL = 2  # --checkpoint-every-steps of the jobs the faults hit: the most work a fault may cost
PERIODIC = f"--checkpoint-every-steps={INTERVAL}"
KEPT = re.compile(r"checkpoint-e(\d+)-(\d+)\.pth\.tar$")  # hpc_imagenet.imagenet.train.checkpoint.kept_name
RECOVER_BOUND_S = 360  # fault -> training again on a loaded 2-core machine (a requeue waits ~2 min)


class ScenarioFailed(AssertionError):
    """A scenario's check failed: the code under test did not do what the scenario expects."""


def check(condition: object, message: object = "") -> None:
    """Raise ScenarioFailed with MESSAGE unless CONDITION holds."""
    if not condition:
        raise ScenarioFailed(str(message))


@dataclass
class Measurement:
    """One fault's outcome, as the fault table shows it. RECOVERED: training went on without a user;
    DETECT_S: fault -> the failure reported; RECOVER_S: fault -> training again; SECONDS_LOST: the
    step time of the steps trained twice. EXTRA: context kept with the record (error, killed)."""

    fault: str
    launcher: str
    nodes: int
    survived: bool
    steps_trained_twice: int
    checkpoints_lost: int = 0
    detect_s: Optional[float] = None
    recovered: Optional[bool] = None
    recover_s: Optional[float] = None
    seconds_lost: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def read_run(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


def steps_trained_twice(*logs: str) -> int:
    """Steps whose progress line rank 0 printed more than once over all runs (-p 1 prints each)."""
    seen = Counter((int(epoch), int(step)) for log in logs for epoch, step, _ in PROGRESS.findall(log))
    return sum(count - 1 for count in seen.values() if count > 1)


def checkpoint_at(run_dir: Path) -> tuple:
    """(epoch, step) of the run folder's checkpoint; raises if it does not load."""
    ckpt = torch.load(run_dir / "checkpoint.pth.tar", weights_only=True)
    return int(ckpt["epoch"]), int(ckpt["step_in_epoch"])


def wait_for_periodic_checkpoint(run_dir: Path, epoch: int = 1) -> tuple:
    """Until a periodic checkpoint inside EPOCH (not at its start) is kept in the run folder (the
    kept copies' names carry the position: no checkpoint has to be loaded); (epoch, sample)."""
    def mid_epoch() -> Optional[tuple]:
        found = [tuple(map(int, match.groups()))
                 for match in map(KEPT.search, map(str, run_dir.glob("checkpoint-e*"))) if match]
        return max(found) if found and max(found)[0] == epoch and max(found)[1] > 0 else None

    return wait_for(f"a periodic checkpoint in epoch {epoch}", mid_epoch, 240, interval=0.1)


def _environ(proc: Path) -> Dict[str, str]:
    words = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
    return dict(word.split("=", 1) for word in words if "=" in word)


def job_pids(cluster: SlurmCluster, job_id: str, node_id: int, rank: Optional[int] = None) -> List[int]:
    """Python processes of CLUSTER's JOB, training step on node NODE_ID (the launcher agent and the
    trainers; with RANK, only the srun-started trainer whose SLURM_PROCID is RANK). Job ids repeat
    across the local clusters on this machine: SLURM_CONF tells ours apart."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            if b"python" not in cmd[0].rsplit(b"/", 1)[-1] or not any(b"imagenet_ddp.py" in word for word in cmd):
                continue
            env = _environ(entry)
        except OSError:
            continue
        if env.get("SLURM_CONF") != str(cluster.conf):
            continue
        if env.get("SLURM_JOB_ID") == job_id and env.get("SLURM_NODEID") == str(node_id) and (
                rank is None or env.get("SLURM_PROCID") == str(rank)):
            pids.append(int(entry.name))
    return pids


def training_again(log: Callable[[], str], since: int, started: float) -> float:
    """Seconds from STARTED until a progress line follows a resume in the log after offset SINCE."""
    def resumed() -> Optional[bool]:
        tail = log()[since:]
        found = RESUMED.search(tail)
        return True if found and PROGRESS_LINE.search(tail, found.end()) else None

    wait_for("training again after the fault", resumed, RECOVER_BOUND_S, interval=0.2)
    return time.monotonic() - started


def seconds_lost(log: str, since: int) -> float:
    """Work thrown away: the step times (global batch / img/s of its progress line) of the steps
    printed before offset SINCE that were printed again after it."""
    batch = int(re.search(r"global batch (\d+)", log).group(1))
    before = {(epoch, step): float(rate) for epoch, step, rate in PROGRESS_LINE.findall(log[:since])}
    again = {(epoch, step) for epoch, step, _ in PROGRESS_LINE.findall(log[since:])}
    return round(sum(batch / rate for key, rate in before.items() if key in again and rate > 0), 2)


def completed_in_one_allocation(cluster: SlurmCluster, job_id: str, log: Callable[[], str], run_dir: Path) -> None:
    """The job COMPLETED in its first allocation (no requeue) and the run trained every epoch."""
    row = cluster.wait_finished(job_id, timeout=600)
    check(row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}")
    check(run_states(cluster, job_id) == ["COMPLETED"], "recovered in the same allocation, no requeue")
    record = read_run(run_dir)
    check(record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS)), record)
