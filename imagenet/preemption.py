"""Stop-and-checkpoint on preemption signals (SLURM time limit, requeue, submitit).

SIGUSR1 (what ``sbatch --signal=USR1@T`` sends), SIGUSR2 (submitit's choice) and SIGTERM (what
SLURM sends at the time limit and scancel sends by default) only raise a flag here; the training
loop sees it at the next print boundary, agrees with every rank, saves a checkpoint and exits with
code 75. Repeated signals are expected (SLURM signals every process while a launcher forwards its
own copy; submitit sends USR2 then TERM) and change nothing, except a SIGTERM arriving long after
the first stop signal: then the process is stuck and exits at once.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Optional

STOP_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM")
STUCK_AFTER_S = 60.0  # a print interval plus a checkpoint save should take far less


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
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), self._handle)
        return self
