"""``python -m hpc_imagenet.requeue SCRIPT [ARGS...]``: run your own training script under the requeue contract.

What the generated batch files start on every rank (under torchrun or srun). Before anything else it listens for
the stop signals (a launcher's agent may have held them pending: they arrive now), so a signal that comes while
the script is still importing is kept. Then it runs SCRIPT as ``python SCRIPT`` would, with a watchdog: once a
stop is requested, a script that has not ended within $HPC_IMAGENET_STOP_GRACE seconds (the batch file sets it to
leave time before the limit) is ended with exit 3 and the run folder marked, so that the job ends before its
time limit and is not requeued; the line it prints says why. A script that stopped through the contract (or a
callback that marked the stop) ends with exit 75 even when it returned normally (0 under a torchrun that would
restart it; the run folder's mark says "requeue" either way).
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from hpc_imagenet import requeue
from hpc_imagenet.imagenet.common import exit_codes, files
from hpc_imagenet.imagenet.process import preemption

USAGE = "usage: python -m hpc_imagenet.requeue SCRIPT [ARGS...]  (your training script, under the requeue contract)"
DEFAULT_GRACE_S = 120.0
POLL_S = 0.5


def grace_s() -> float:
    try:
        return float(os.environ.get(requeue.GRACE_ENV) or DEFAULT_GRACE_S)
    except ValueError:
        raise SystemExit(f"error: {requeue.GRACE_ENV}={os.environ[requeue.GRACE_ENV]!r} is not seconds: "
                         "set a number or unset it") from None


def _ignored(script: str, grace: float, why: str) -> str:
    return (f"error: {script} did not stop within {grace:.0f} s of the stop request ({why}): it does not follow the "
            "requeue contract (hpc_imagenet.requeue.should_stop, save, stop), so it is ended before the time limit "
            "and not requeued, as a requeue would only start it over (docs/slurm.md, Your own script)")


def _watch(script: str, grace: float) -> None:
    """Daemon thread: end the process GRACE seconds after a stop request that the script does not act on."""
    stop = requeue.listen()
    while not stop.pending(requeue.run_dir()):
        time.sleep(POLL_S)
    time.sleep(grace)
    print(_ignored(script, grace, stop.name or "stop"), file=sys.stderr, flush=True)
    try:
        files.write_text(requeue.run_dir() / requeue.IGNORED_MARK, f"{script}\n")
    finally:
        os._exit(requeue.EXIT_IGNORED)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# srun starts one task per process and names its place in SLURM's variables; a DDP script reads torch's
SRUN_TO_TORCH = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID",
                 "LOCAL_WORLD_SIZE": "SLURM_NTASKS_PER_NODE"}


def torch_variables_from_srun(environ=os.environ) -> None:
    """Under srun (no RANK yet), set torch's rank variables from SLURM's; torchrun's own stay as they are."""
    if "RANK" in environ or "SLURM_PROCID" not in environ:
        return
    for torch_name, slurm_name in SRUN_TO_TORCH.items():
        if slurm_name in environ:
            environ[torch_name] = environ[slurm_name].split("(")[0]  # SLURM_NTASKS_PER_NODE may read "2(x4)"


class StagedDataError(Exception):
    """This node has no complete copy of the data the batch file staged (one line)."""


def staged_data(environ=os.environ) -> None:
    """Where the batch file staged DATA (STAGE_DIR, expanded here, on this node), give the script this node's copy
    in $HPC_IMAGENET_DATA: the copy's folder depends on the node's own STAGE_DIR ($TMPDIR) and the user."""
    stage_dir = environ.pop(requeue.STAGE_DIR_ENV, "")
    if not stage_dir or not environ.get(requeue.DATA_ENV):
        return
    from hpc_imagenet.imagenet.data import staging  # no torch: the copy is found before the script imports it

    try:
        copy = staging.destination(environ[requeue.DATA_ENV], staging.expand(stage_dir))
    except staging.StagingError as exc:
        raise StagedDataError(str(exc)) from None
    if not (copy / staging.MARKER).is_file():
        raise StagedDataError(f"{copy} is not a complete copy of {environ[requeue.DATA_ENV]} on this node (the "
                              "batch file stages it before the script starts): see the staging step's line in the "
                              "job log")
    environ[requeue.DATA_ENV] = str(copy)


def run(script: str, args: Sequence[str]) -> int:
    """Run SCRIPT with ARGS as __main__ under the contract; the process's exit status."""
    if (requeue.run_dir() / requeue.IGNORED_MARK).exists():  # a launcher restarting what the watchdog ended
        print(f"error: {script} was ended for not stopping at the stop request in this allocation; not started "
              "again", file=sys.stderr, flush=True)
        return requeue.EXIT_IGNORED
    torch_variables_from_srun()
    try:
        staged_data()
    except StagedDataError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return requeue.EXIT_DO_NOT_RETRY
    threading.Thread(target=_watch, args=(script, grace_s()), name="requeue-watchdog", daemon=True).start()
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` would
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    _close_process_group()
    record_environment()
    if requeue.stopped() and code in (0, requeue.EXIT_STOPPED):
        return exit_codes.preempted_status()  # the run folder's mark tells the batch file to requeue
    return code


def record_environment() -> None:
    """Where the scaling harness measures the run ($HPC_IMAGENET_MEASURED): rank 0 writes what it ran on (versions,
    devices, host, job) into the run folder's environment.json, for the point's record. A failure to write is a
    warning: the training itself is over."""
    if not os.environ.get(requeue.MEASURED_ENV) or os.environ.get("RANK", "0") != "0":
        return
    from hpc_imagenet.imagenet.run import sysinfo  # here: only the harness's runs need it

    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or 1)
    try:
        files.write_text(requeue.run_dir() / requeue.ENVIRONMENT_FILE, json.dumps(sysinfo.collect(nodes=nodes)))
    except OSError as exc:
        print(f"warning: cannot write {requeue.ENVIRONMENT_FILE}: {exc}", file=sys.stderr, flush=True)


def _close_process_group() -> None:
    """End a process group the script left open (Lightning's trainer does), the engine's way: its cleanup leaves
    gloo's to the process's end on torch before 2.10, where destroying it can hang for good."""
    if "torch.distributed" in sys.modules:
        from hpc_imagenet.imagenet.process import group

        group.cleanup()


def leave(code: int) -> None:
    """End the process with CODE once the script's exit handlers have run and its output is flushed, skipping the
    interpreter's own teardown: torch's C++ objects torn down there can abort a process that finished cleanly
    ("terminate called without an active exception", seen at the end of DDP runs on the test cluster), and a
    launcher would take that abort for a failure and restart the workers."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    requeue.listen()  # first: a stop signal during the imports below, or the script's, is kept
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not args or args[0].startswith("-"):
        print(f"error: {USAGE}", file=sys.stderr)
        return requeue.EXIT_DO_NOT_RETRY
    if not Path(args[0]).is_file():
        print(f"error: no such script: {args[0]} (give its path from the folder the job runs in)", file=sys.stderr)
        return requeue.EXIT_DO_NOT_RETRY
    try:
        return run(args[0], args[1:])
    finally:
        # a stop signal from here on waits, pending, for the process's end: the interpreter restores the default
        # actions as it shuts down, and a signal then would kill it (a stop after the script finished)
        signal.pthread_sigmask(signal.SIG_BLOCK, [getattr(signal, name) for name in preemption.STOP_SIGNALS])
