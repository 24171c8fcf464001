"""Stop-and-checkpoint on preemption signals (SLURM time limit, requeue, submitit).

SIGUSR1 (what ``sbatch --signal=USR1@T`` sends), SIGUSR2 (submitit's choice) and SIGTERM (what
SLURM sends at the time limit and scancel sends by default) only raise a flag here; the training
loop sees it at the next print boundary, agrees with every rank, saves a checkpoint and exits with
code 75. A second SIGTERM or SIGINT ends the process at once.
"""
from __future__ import annotations

import signal
import threading
from typing import Optional

STOP_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM")


class StopSignal:
    def __init__(self) -> None:
        self.requested = False
        self.name: Optional[str] = None

    def _handle(self, signum, frame) -> None:
        if self.requested and signum in (signal.SIGTERM, signal.SIGINT):
            raise SystemExit(128 + signum)  # asked twice: stop now
        self.requested = True
        self.name = signal.Signals(signum).name

    def install(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                signal.signal(getattr(signal, name), self._handle)
        return self
