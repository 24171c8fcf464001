"""The project's SLURM client: submit a batch file, ask a job's state, wait on jobs, cancel them.

Whatever cluster ``sbatch`` on PATH reaches (``SLURM_CONF`` in the environment on a test cluster, the
site's config on a login node); every call takes an optional ``env`` for a cluster other than the
process's own. The harness's runners, ``hpc_imagenet.slurm.jobchain`` and the local cluster's scenarios all go
through here; ``hpc_imagenet.slurm.submit`` keeps submitit, which is a client of its own.

Jobs are watched with ``squeue`` (no accounting database needed): a job that has left the queue is
finished, and what it left on the shared filesystem says how it went. Where accounting exists,
:func:`state` and :func:`accounting` ask ``sacct`` for a finished job's final state. Thin wrappers
over the commands rather than a library: pyslurm needs the site's libslurm headers at install time,
and these five commands are what a user would type.
"""
from __future__ import annotations

import getpass
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")
DONE = "DONE"  # gone from the queue, or in a final state
POLL_S = 2.0
CLIENT_TIMEOUT_S = 120  # an sbatch/squeue/scancel that takes longer: slurmctld is not answering
ACCOUNTING_FIELDS = ("JobIDRaw", "JobID", "JobName", "State", "ExitCode", "NodeList", "Start", "End")

Env = Optional[Mapping[str, str]]


class SlurmError(RuntimeError):
    """A SLURM command missing, refusing or not answering; one line with the fix."""


class Timeout(SlurmError):
    """Jobs still running past the caller's timeout (they have been cancelled)."""


def run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Env = None, stdin: Optional[str] = None,
        timeout_s: float = CLIENT_TIMEOUT_S) -> str:
    """One client command's standard output; :class:`SlurmError` when it is missing, fails or hangs."""
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, input=stdin,
                             env=None if env is None else dict(env), timeout=timeout_s)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} is not on PATH; run this on a SLURM login node (or load the slurm "
                         "module)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{cmd[0]} did not answer in {timeout_s:.0f} s; is slurmctld up (scontrol ping)?") from None
    if out.returncode != 0:
        why = (out.stderr or out.stdout).strip().splitlines()[-1:]
        raise SlurmError(f"{' '.join(map(str, cmd[:2]))} failed: {why[0] if why else f'exit {out.returncode}'}")
    return out.stdout


def submit(script: Optional[Path] = None, options: Sequence[str] = (), *, text: Optional[str] = None,
           cwd: Optional[Path] = None, env: Env = None) -> str:
    """``sbatch --parsable [OPTIONS] SCRIPT`` (or the batch script TEXT on sbatch's standard input); the job id."""
    if (script is None) == (text is None):
        raise ValueError("submit takes one of a batch file (SCRIPT) and a script's text (TEXT)")
    out = run(["sbatch", "--parsable", *options, *([str(script)] if script else [])], cwd=cwd, env=env, stdin=text)
    return out.strip().split(";")[0]


def queue(env: Env = None) -> Dict[str, Tuple[str, str]]:
    """{job id (an array's tasks as ID_TASK): (state, reason)} of this user's jobs slurmctld still knows,
    recently finished ones included (with their final state)."""
    # Not -j: squeue fails with "Invalid job id" once a finished job has been purged from slurmctld's memory.
    out = run(["squeue", "-h", "--me", "--states=all", "-r", "-o", "%i|%T|%r"], env=env)
    return {f[0]: (f[1], f[2]) for f in (line.split("|", 2) for line in out.splitlines()) if len(f) == 3}


def active(env: Env = None) -> Dict[str, Tuple[str, str]]:
    """The entries of :func:`queue` still queued or running."""
    return {j: e for j, e in queue(env).items() if e[0] in QUEUED + RUNNING}


def in_queue(job_id: str, env: Env = None) -> bool:
    """Whether the job (or a task of the array it is) is still queued or running."""
    return any(j == job_id or j.startswith(f"{job_id}_") for j in active(env))


def accounting(job_id: str, env: Env = None) -> List[Dict[str, str]]:
    """``sacct``'s rows for a job and its steps, every run of a requeued job (-D) oldest first; needs
    slurmdbd (without it sacct fails: :class:`SlurmError`)."""
    out = run(["sacct", "-n", "-P", "-D", "-j", job_id, "--format", ",".join(ACCOUNTING_FIELDS)], env=env)
    return [dict(zip(ACCOUNTING_FIELDS, line.split("|"))) for line in out.splitlines() if line.strip()]


def state(job_id: str, env: Env = None) -> str:
    """The job's state as SLURM words it: squeue's while slurmctld knows the job, then sacct's last run
    (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...); DONE when neither knows it (purged, no accounting)."""
    entry = queue(env).get(job_id)
    if entry:
        return entry[0]
    try:
        rows = [r for r in accounting(job_id, env) if r["JobID"] == job_id]
    except SlurmError:  # no accounting database: gone from the queue is all there is to know
        return DONE
    return rows[-1]["State"].split()[0] if rows else DONE


def progress(entry: Optional[Tuple[str, str]]) -> str:
    """"queued (reason)", "running" or DONE for a :func:`queue` entry. The reason (Priority, Resources,
    Dependency, PartitionNodeLimit, ...) tells a user why a job waits."""
    job_state, reason = entry or ("", "")
    reason = reason.strip()
    if job_state in QUEUED:
        return f"queued ({reason})" if reason not in ("", "None") else "queued"
    return "running" if job_state in RUNNING else DONE


def states(job_ids: Sequence[str], env: Env = None) -> Dict[str, str]:
    """:func:`progress` of each job; DONE once a job has left the queue or reached a final state."""
    if not job_ids:
        return {}
    now = queue(env)
    return {j: progress(now.get(j)) for j in job_ids}


def cancel(job_ids: Sequence[str], timeout_s: float = CLIENT_TIMEOUT_S, env: Env = None) -> None:
    """scancel every job given; those already gone are ignored. A slurmctld that does not answer must
    not hang a Ctrl-C: after TIMEOUT_S the jobs are named for the user to cancel."""
    if job_ids:
        _scancel(list(job_ids), f"SLURM job(s) {', '.join(job_ids)}", timeout_s, env)


def cancel_mine(env: Env = None, full: bool = False, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
    """scancel every job of this user (``full``: every step's processes too, not only the batch shell's)."""
    user = getpass.getuser()
    _scancel([*(["--full"] if full else []), f"--user={user}"], f"every SLURM job of {user}", timeout_s, env)


def _scancel(args: List[str], what: str, timeout_s: float, env: Env) -> None:
    """scancel ARGS; never raises (a cancel is the way out of an error or a Ctrl-C): a hang is logged with
    the command for the user to type."""
    try:
        subprocess.run(["scancel", *args], capture_output=True, text=True, timeout=timeout_s,
                       env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        log.error("scancel did not answer in %.0f s; cancel the jobs yourself: scancel %s", timeout_s, " ".join(args))
        return
    except FileNotFoundError:
        log.error("scancel is not on PATH; cancel the jobs on a login node: scancel %s", " ".join(args))
        return
    log.warning("cancelled %s", what)


def signal(job_id: str, name: str, env: Env = None) -> None:
    """Send signal NAME (USR1, USR2, TERM...) to the job's batch shell alone, as a user's scancel does."""
    run(["scancel", "--batch", f"--signal={name}", job_id], env=env)


def wait(job_ids: Sequence[str], on_change: Callable[[str, str], None], timeout_s: Optional[float] = None,
         poll_s: float = POLL_S, env: Env = None) -> None:
    """Poll until every job is DONE, calling ``on_change(job, progress)`` at each change.

    Ctrl-C, a SLURM client error or the timeout cancels the jobs still queued or running, then
    re-raises (:class:`Timeout` for the timeout).
    """
    last: Dict[str, str] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            for j, s in states([j for j in job_ids if last.get(j) != DONE], env).items():
                if last.get(j) != s:
                    last[j] = s
                    on_change(j, s)
            if all(last.get(j) == DONE for j in job_ids):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise Timeout(f"jobs still running after {timeout_s:.0f} s")
            time.sleep(poll_s)
    except BaseException:
        cancel([j for j in job_ids if last.get(j) != DONE], env=env)
        raise


def job_output(log_dir: Path, lines: int = 40) -> str:
    """The tail of the newest job output file in ``log_dir`` (slurm-<id>.out)."""
    found = sorted(log_dir.glob("slurm-*.out"), key=os.path.getmtime)
    return "\n".join(found[-1].read_text(errors="replace").strip().splitlines()[-lines:]) if found else ""
