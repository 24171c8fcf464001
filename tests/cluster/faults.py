"""Helpers shared by the cluster tests that inject faults: the fault records for RESULTS.md's fault
table, the work a fault cost (steps trained twice and their seconds), the time until training
runs again, and finding a job's trainer processes on a node.

With HPC_IMAGENET_FAULT_RECORDS set (``python -m results.bench faults`` sets it) each fault test
appends one harness record there; a plain ``pytest`` run writes nothing."""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Callable, List, Optional

import torch

from tests.cluster.requeue import EPOCHS, run_states
from tests.helpers import read_run
from tests.slurm_cluster import SlurmCluster, wait_for

RECORDS_ENV = "HPC_IMAGENET_FAULT_RECORDS"  # where to append the records (unset: none)
SWEEP_ENV = "HPC_IMAGENET_FAULT_SWEEP"
PROGRESS = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]")
PROGRESS_LINE = re.compile(r"^Epoch: \[(\d+)\]\[\s*(\d+)/\d+\].*?([\d.]+) img/s$", re.M)
RESUMED = re.compile(r"resumed from \S+: epoch (\d+), step (\d+)")
INTERVAL = 2  # --checkpoint-every-steps of the jobs the faults hit: the most work a fault may cost
PERIODIC = f"--checkpoint-every-steps={INTERVAL}"
KEPT = re.compile(r"checkpoint-e(\d+)-(\d+)\.pth\.tar$")  # imagenet.checkpoint.kept_name
RECOVER_BOUND_S = 360  # fault -> training again on a loaded 2-core machine (a requeue waits ~2 min)
# The scenarios of a wave run at once (tests/cluster/scenarios.py), except when they are recorded: the
# records' times (to detect, to recover, the seconds of a step) are then each fault's alone, not those
# of faults sharing the 2 cores with others.
AT_ONCE = 1 if os.environ.get(RECORDS_ENV) else None


def record_fault(fault: str, launcher: str, nodes: int, survived: bool, detect_s: Optional[float],
                 twice: int, lost: int, recovered: Optional[bool] = None, recover_s: Optional[float] = None,
                 seconds_lost: Optional[float] = None, **extra) -> None:
    """Append this test's measurement to $HPC_IMAGENET_FAULT_RECORDS (see results/report/faults.py).
    RECOVERED: training went on without a user; RECOVER_S: fault -> training again; SECONDS_LOST:
    the step time of the steps trained twice."""
    path = os.environ.get(RECORDS_ENV)
    if not path:
        return
    from imagenet import sysinfo
    from results.core import records

    metrics = {"survived": int(survived), "steps_trained_twice": twice, "checkpoints_lost": lost}
    for key, value in (("detect_s", detect_s), ("recover_s", recover_s), ("seconds_lost", seconds_lost)):
        if value is not None:
            metrics[key] = round(value, 2)
    if recovered is not None:
        metrics["recovered"] = int(recovered)
    rec = records.make_record("fault", os.environ.get(SWEEP_ENV, "pytest"),
                              {"fault": fault, "launcher": launcher, "nodes": nodes}, metrics,
                              sysinfo.collect(nodes=nodes), command=f"pytest {_test_file()}", **extra)
    records.append(Path(path), rec)


def _test_file() -> str:
    """The running test's file name (pytest sets PYTEST_CURRENT_TEST to 'path::name (phase)')."""
    return Path(os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[0]).name


def steps_trained_twice(*logs: str) -> int:
    """Steps whose progress line rank 0 printed more than once over all runs (-p 1 prints each)."""
    seen = Counter((int(e), int(s)) for log in logs for e, s, _ in PROGRESS.findall(log))
    return sum(n - 1 for n in seen.values() if n > 1)


def checkpoint_at(run_dir: Path) -> tuple:
    """(epoch, step) of the run folder's checkpoint; raises if it does not load."""
    ckpt = torch.load(run_dir / "checkpoint.pth.tar", weights_only=True)
    return int(ckpt["epoch"]), int(ckpt["step_in_epoch"])


def wait_for_periodic_checkpoint(run_dir: Path, epoch: int = 1) -> tuple:
    """Until a periodic checkpoint inside EPOCH (not at its start) is kept in the run folder (the
    kept copies' names carry the position: no checkpoint has to be loaded); (epoch, sample)."""
    def mid_epoch() -> Optional[tuple]:
        found = [tuple(map(int, m.groups())) for m in map(KEPT.search, map(str, run_dir.glob("checkpoint-e*")))
                 if m]
        return max(found) if found and max(found)[0] == epoch and max(found)[1] > 0 else None

    return wait_for(f"a periodic checkpoint in epoch {epoch}", mid_epoch, 240, interval=0.1)


def job_pids(cluster: SlurmCluster, job_id: str, node_id: int, rank: Optional[int] = None) -> List[int]:
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


def training_again(log: Callable[[], str], since: int, t0: float) -> float:
    """Seconds from T0 until a progress line follows a resume in the log after offset SINCE."""
    def resumed() -> Optional[bool]:
        tail = log()[since:]
        found = RESUMED.search(tail)
        return True if found and PROGRESS_LINE.search(tail, found.end()) else None

    wait_for("training again after the fault", resumed, RECOVER_BOUND_S, interval=0.2)
    return time.monotonic() - t0


def seconds_lost(log: str, since: int) -> float:
    """Work thrown away: the step times (global batch / img/s of its progress line) of the steps
    printed before offset SINCE that were printed again after it."""
    batch = int(re.search(r"global batch (\d+)", log).group(1))
    before = {(e, s): float(r) for e, s, r in PROGRESS_LINE.findall(log[:since])}
    again = {(e, s) for e, s, _ in PROGRESS_LINE.findall(log[since:])}
    return round(sum(batch / rate for key, rate in before.items() if key in again and rate > 0), 2)


def completed_in_one_allocation(cluster: SlurmCluster, job_id: str, log: Callable[[], str], run_dir: Path) -> None:
    """The job COMPLETED in its first allocation (no requeue) and the run trained every epoch."""
    row = cluster.wait_finished(job_id, timeout=600)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    assert run_states(cluster, job_id) == ["COMPLETED"], "recovered in the same allocation, no requeue"
    record = read_run(run_dir)
    assert record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
