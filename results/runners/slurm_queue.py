"""The SLURM client side of the harness: submit batch files, watch their states, cancel them.

Whatever cluster ``sbatch`` on PATH reaches (``SLURM_CONF`` in the environment on a test cluster,
the site's config on a login node). Jobs are watched with ``squeue``, which needs no accounting
database: a job that has left the queue is finished, and what it left on the shared filesystem
(run.json, its output file) says how it went. Every job this module submitted is cancelled by
:func:`watch` when the caller is interrupted or runs out of time, so nothing stays queued.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

log = logging.getLogger(__name__)

QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")
DONE = "DONE"  # gone from the queue, or in a final state
POLL_S = 2.0
CLIENT_TIMEOUT_S = 120  # an sbatch/squeue/scancel that takes longer: slurmctld is not answering


class SlurmError(RuntimeError):
    """sbatch/squeue missing or refusing; one line with the fix."""


class Timeout(RuntimeError):
    """The sweep ran past its --timeout (its jobs have been cancelled)."""


def _run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, env=env, timeout=CLIENT_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} is not on PATH; run this on a SLURM login node (or load the slurm "
                         "module)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{cmd[0]} did not answer in {CLIENT_TIMEOUT_S} s; is slurmctld up (scontrol ping)?") from None
    if out.returncode != 0:
        raise SlurmError(f"{' '.join(cmd[:2])} failed: {(out.stderr or out.stdout).strip().splitlines()[-1:]}")
    return out.stdout


def submit(script: Path, sbatch_args: Sequence[str] = (), cwd: Optional[Path] = None,
           env: Optional[Dict[str, str]] = None) -> str:
    """``sbatch --parsable``; the job id."""
    out = _run(["sbatch", "--parsable", *sbatch_args, str(script)], cwd=cwd, env=env)
    return out.strip().split(";")[0]


def states(job_ids: Sequence[str]) -> Dict[str, str]:
    """"queued (reason)", "running" or DONE per job; DONE once a job has left the queue. The reason
    (Priority, Resources, Dependency, PartitionNodeLimit, ...) tells a user why a point waits."""
    if not job_ids:
        return {}
    # --states=all: recently finished jobs are listed with their final state. Not -j: squeue fails
    # with "Invalid job id" once a finished job has been purged from slurmctld's memory.
    out = _run(["squeue", "-h", "--me", "--states=all", "-o", "%i %T %r"])
    seen = {f[0]: f[1:] for f in (line.split(None, 2) for line in out.splitlines()) if f}
    return {j: _kind(*seen.get(j, ["", ""])) for j in job_ids}


def _kind(state: str, reason: str = "") -> str:
    if state in QUEUED:
        return f"queued ({reason.strip()})" if reason.strip() not in ("", "None") else "queued"
    if state in RUNNING:
        return "running"
    return DONE


def cancel(job_ids: Sequence[str], timeout_s: float = CLIENT_TIMEOUT_S) -> None:
    """scancel every job given; those already gone are ignored. A slurmctld that does not answer
    must not hang a Ctrl-C: after TIMEOUT_S the jobs are named for the user to cancel."""
    if not job_ids:
        return
    try:
        subprocess.run(["scancel", *job_ids], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.error("scancel did not answer in %.0f s; cancel the jobs yourself: scancel %s", timeout_s,
                  " ".join(job_ids))
        return
    log.warning("cancelled SLURM job(s) %s", ", ".join(job_ids))


def watch(job_ids: Sequence[str], on_change: Callable[[str, str], None], timeout_s: Optional[float] = None,
          poll_s: float = POLL_S) -> None:
    """Poll until every job is DONE, calling ``on_change(job, state)`` at each change.

    Ctrl-C, a SLURM client error or the timeout cancels the jobs still queued or running, then
    re-raises (:class:`Timeout` for the timeout).
    """
    last: Dict[str, str] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            now = states([j for j in job_ids if last.get(j) != DONE])
            for j, s in now.items():
                if last.get(j) != s:
                    last[j] = s
                    on_change(j, s)
            if all(last.get(j) == DONE for j in job_ids):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise Timeout(f"jobs still running after {timeout_s:.0f} s")
            time.sleep(poll_s)
    except BaseException:
        cancel([j for j in job_ids if last.get(j) != DONE])
        raise


def job_output(log_dir: Path, lines: int = 40) -> str:
    """The tail of the job's own output file(s) in ``log_dir`` (slurm-<id>.out)."""
    files = sorted(log_dir.glob("slurm-*.out"), key=os.path.getmtime)
    return "\n".join(files[-1].read_text(errors="replace").strip().splitlines()[-lines:]) if files else ""

