"""Stop-and-checkpoint on preemption signals (SLURM time limit, requeue, submitit) or a stop file.

SIGUSR1 (what ``sbatch --signal=USR1@T`` sends), SIGUSR2 (submitit's choice) and SIGTERM (what
SLURM sends at the time limit and scancel sends by default) only raise a flag here; the training
loop looks at it at every safe point (each print boundary and right after each end-of-epoch
checkpoint), agrees with every rank, saves a checkpoint if it has none for this point, and exits
with code 75. Repeated signals are expected (SLURM signals every process while a launcher forwards
its own copy; submitit sends USR2 then TERM) and change nothing, except a SIGTERM arriving long
after the first stop signal: then the process is stuck and exits at once.

A signal can come before a trainer exists or listens: while the launcher is still starting it, or
during the imports. So the entry scripts install the handlers before importing anything heavy
(:func:`install_early`; this also replaces a disposition inherited as ignored, see
hpc_imagenet/slurm/generate/), and the generated batch scripts also write :data:`STOP_FILE` into the run
folder when they get the time-limit signal. Rank 0 looks for that file at every safe point, so a
stop request reaches trainers that were not listening yet; the file is removed once acted on.
"""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Optional

STOP_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM")
STOP_FILE = "stop.requested"  # in the run folder: `touch RUN_DIR/stop.requested` checkpoints and stops
STUCK_AFTER_S = 60.0  # a print interval plus a checkpoint save should take far less

_early: Optional["StopSignal"] = None


class StopSignal:
    def __init__(self) -> None:
        self.requested = False
        self.name: Optional[str] = None
        self.first_at = 0.0

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.requested:
            if signum == signal.SIGTERM and now - self.first_at > STUCK_AFTER_S:
                raise SystemExit(128 + signum)
            return
        self.requested, self.first_at = True, now
        self.name = signal.Signals(signum).name

    def install(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():
            signums = [getattr(signal, name) for name in STOP_SIGNALS]
            for signum in signums:
                signal.signal(signum, self._handle)
            # a launcher may have blocked them so that they wait, pending, for this handler
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signums)
        return self

    def pending(self, run_dir: Optional[Path] = None) -> bool:
        """A signal came, or (given the run folder) the stop file is there."""
        if not self.requested and run_dir is not None and (Path(run_dir) / STOP_FILE).exists():
            self.requested, self.name, self.first_at = True, STOP_FILE, time.monotonic()
        return self.requested


def install_early() -> StopSignal:
    """Listen for stop signals from now on (the entry scripts call it before their imports)."""
    global _early
    _early = StopSignal().install()
    return _early


def for_run() -> StopSignal:
    """The handler the entry script installed, else a new one (in-process callers, spawned workers)."""
    global _early
    stop, _early = _early, None  # a second run in this process starts with a fresh flag
    return stop if stop is not None else StopSignal().install()


def clear_stop_file(run_dir: Optional[Path]) -> None:
    """Remove RUN_DIR's stop file (None: this rank does not own it, nothing to do)."""
    if run_dir is not None:
        (Path(run_dir) / STOP_FILE).unlink(missing_ok=True)
