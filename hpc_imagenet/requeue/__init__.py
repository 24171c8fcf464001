"""The requeue contract for your own training script: what the generated batch files promise it, and the few
calls it makes to keep its side (docs/slurm.md, "Your own script").

The batch file (``python -m hpc_imagenet.slurm.generate --script train.py``) starts every rank as
``python -m hpc_imagenet.requeue train.py ARGS``, which listens for the stop signals before your script imports
anything, so a signal that comes while it is still importing is kept. Then:

- **The signal.** SLURM sends USR2 to the batch file ``--signal-seconds`` (180) before the time limit; it passes it
  on to every rank and writes ``stop.requested`` into the run folder. SIGTERM (``scontrol requeue``, a preemption,
  the time limit itself) and USR1 count the same.
- **The run folder**, the same after every requeue: :func:`run_dir` (``$HPC_IMAGENET_RUN_DIR``, the batch file's
  ``LOG_DIR``).
- **The data** (generated with ``--data DIR``): :func:`data_dir` (``$HPC_IMAGENET_DATA``); with ``--stage-dir``
  the batch file copies DIR to each node first and this is the node's own copy.
- **"Should I stop?"**: :func:`should_stop`, the same answer on every rank (one all-reduce): call it on every rank
  at the same step boundary.
- **Save**: :func:`save` writes atomically from rank 0 (the old checkpoint or the new one, never a torn one).
- **Resume**: :func:`latest` is the newest checkpoint, or None on the first start.
- **Measured** (optional): :func:`step_done` after each step records its time when the scaling harness runs the
  script (``bench scaling --script`` sets ``$HPC_IMAGENET_MEASURED``; elsewhere it writes nothing).
- **Stopped, requeue me**: :func:`stop` (after the save) marks the run folder and exits 75; the batch file requeues
  the job. **Finished**: exit 0. **Do not retry**: exit 2 (:data:`EXIT_DO_NOT_RETRY`), the batch file neither
  restarts nor requeues.

A script that never asks is ended ``$HPC_IMAGENET_STOP_GRACE`` seconds after the signal, before the time limit,
and not requeued (a requeue would only start it over); its batch log says so. Written here rather than taken from
Lightning or torchrun because neither covers it: torchrun forwards no USR1/USR2, Lightning requeues only under
srun, from inside its signal handler, with ``scontrol`` on the rank.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Union

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.exit_codes import EXIT_PREEMPTED, EXIT_USAGE
from hpc_imagenet.imagenet.process import preemption
from hpc_imagenet.requeue import steps

RUN_DIR_ENV = "HPC_IMAGENET_RUN_DIR"
GRACE_ENV = "HPC_IMAGENET_STOP_GRACE"
DATA_ENV = "HPC_IMAGENET_DATA"  # the dataset folder the script reads (the runner makes it this node's staged copy)
# Set by the scaling harness on the runs it measures: step_done writes steps.tsv and the runner writes what rank 0
# ran on into ENVIRONMENT_FILE. Elsewhere both stay off: a long run would log every step to no one.
MEASURED_ENV = "HPC_IMAGENET_MEASURED"
ENVIRONMENT_FILE = "environment.json"
STAGE_DIR_ENV = "HPC_IMAGENET_STAGE_DIR"  # the batch file's STAGE_DIR, for the runner to find this node's copy
EXIT_STOPPED = EXIT_PREEMPTED  # 75: a checkpoint is saved, requeue the job to continue
EXIT_DO_NOT_RETRY = EXIT_USAGE  # 2: it would fail the same way again
EXIT_IGNORED = 3  # the script did not stop within the grace after the signal (set by the runner)
REQUEUE_MARK = "requeue.requested"  # in the run folder: the script stopped at the signal, requeue it
IGNORED_MARK = "stop.ignored"  # in the run folder: the script did not stop; do not requeue it
CHECKPOINT = "checkpoint.pth.tar"  # the engine's name: the batch file's start budget watches it

_stop: Optional[preemption.StopSignal] = None
_marked = False  # this process's run stopped for the signal (mark_stopped was called)
_steps: Optional[steps.StepLog] = None  # step_done's file, opened at the first step


def listen() -> preemption.StopSignal:
    """Start listening for the stop signals (the runner does it before the script's imports; idempotent)."""
    global _stop
    if _stop is None:
        _stop = preemption.StopSignal().install()
    return _stop


def run_dir() -> Path:
    """The run folder, the same after every requeue ($HPC_IMAGENET_RUN_DIR; runs/local outside a batch file)."""
    return Path(os.environ.get(RUN_DIR_ENV) or "runs/local")


def data_dir(default: Optional[Union[str, Path]] = None) -> Optional[Path]:
    """The dataset folder to read: $HPC_IMAGENET_DATA (the batch file's DATA, or this node's copy of it where the
    file stages it), else DEFAULT (e.g. the script's own --data, outside a batch file)."""
    given = os.environ.get(DATA_ENV) or default
    return Path(given) if given else None


def _dist():
    """torch.distributed when a process group is up, else None (one process)."""
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _rank() -> int:
    dist = _dist()
    return dist.get_rank() if dist is not None else 0


def stop_requested() -> bool:
    """This process's own view: a stop signal came, or the batch file's stop file is in the run folder."""
    return listen().pending(run_dir())


def should_stop() -> bool:
    """Whether to stop now, the same answer on every rank (any rank's request counts): call it on every rank at
    the same step boundary, as it is a collective when a process group is up."""
    local = stop_requested()
    dist = _dist()
    if dist is None:
        return local
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    flag = torch.tensor([1.0 if local else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def save(state: Any, name: str = CHECKPOINT) -> Path:
    """torch.save STATE as run_dir()/NAME from rank 0, atomically; every rank waits until it is written."""
    import torch

    path = run_dir() / name
    if _rank() == 0:
        files.atomic_write(path, lambda f: torch.save(state, f))
    dist = _dist()
    if dist is not None:
        dist.barrier()
    return path


def latest(name: str = CHECKPOINT) -> Optional[Path]:
    """The checkpoint to resume from: run_dir()/NAME, or None on the first start."""
    path = run_dir() / name
    return path if path.is_file() else None


def step_done(images: int) -> None:
    """After each training step: its end time and IMAGES (all ranks' together) into run_dir()/steps.tsv, where the
    scaling harness measures the run ($HPC_IMAGENET_MEASURED; rank 0 writes, the others return at once)."""
    global _steps
    if _rank() != 0 or not os.environ.get(MEASURED_ENV):
        return
    if _steps is None:
        _steps = steps.StepLog(run_dir() / steps.STEPS_FILE)
    _steps.done(images)


def mark_stopped() -> None:
    """Tell the batch file this run stopped for the signal with its checkpoint saved (rank 0 writes the mark)."""
    global _marked
    _marked = True
    if _rank() == 0:
        files.write_text(run_dir() / REQUEUE_MARK, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {listen().name}\n")


def stop() -> None:
    """After :func:`save`: mark the run folder for a requeue and exit 75 (every rank calls it)."""
    mark_stopped()
    dist = _dist()
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    raise SystemExit(EXIT_STOPPED)


def stopped() -> bool:
    """Whether this process's run stopped for the signal and asked for a requeue."""
    return _marked
