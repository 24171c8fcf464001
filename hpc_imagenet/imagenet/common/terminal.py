"""The one progress display: a line redrawn in place on a terminal, plain lines in logs; and the
training loop's console, which shows on rank 0 only.

Shard conversion, ``hpc_imagenet.imagenet.data.prepare``, staging and the training loop all report progress through
:class:`ProgressLine`. Written here rather than taken from tqdm or rich: both decide on isatty()
alone, and that is the wrong test. Open MPI gives its ranks a pty even when mpirun writes to a
batch log, where ``\\r``-ended lines pile up into one line that grep calls binary.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Optional, TextIO

# Set in every SLURM job (whose output is a batch log) and by MPI launchers, which collect and
# relay their ranks' output: a plain line is always safe there.
COLLECTED = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
LIVE_SECONDS = 0.5  # a redrawn line changes at most this often, whatever the plain lines' interval
CLEAR_TO_END = "\033[K"  # the rest of a longer earlier line


def overwrite_progress(stream: Optional[TextIO] = None) -> bool:
    """Whether progress written to STREAM (default stdout) may end in \\r, rewriting one terminal
    line, instead of \\n: only on an interactive terminal outside SLURM jobs and MPI launchers."""
    if any(name in os.environ for name in COLLECTED) or os.environ.get("TERM", "dumb") == "dumb":
        return False
    return (stream or sys.stdout).isatty()


class ProgressLine:
    """Progress on STREAM (default stdout): on an interactive terminal (:func:`overwrite_progress`)
    each update redraws one line; elsewhere each update is a plain line, at most one every EVERY
    seconds (0: every update). A final update always shows and ends the line."""

    def __init__(self, stream: Optional[TextIO] = None, every: float = 0.0):
        self.stream = stream or sys.stdout
        self.live = overwrite_progress(self.stream)
        self.every = min(every, LIVE_SECONDS) if self.live else every
        self.last = time.monotonic()  # the first plain line comes EVERY seconds after the start
        self.open = False  # a redrawn line is showing, not yet ended

    def due(self) -> bool:
        """Whether an update now would show (callers skip building an expensive line otherwise)."""
        return time.monotonic() - self.last >= self.every

    def show(self, text: str, final: bool = False) -> None:
        if not (final or self.due()):
            return
        self.last = time.monotonic()
        if self.live:  # the cursor goes back to the line's start: the next update, or any print, replaces it
            self.stream.write(text + CLEAR_TO_END + ("\n" if final else "\r"))
            self.open = not final
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End a redrawn line left open (the display stops before its final update)."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


class NullConsole:
    """The console of a rank that shows nothing (every rank but 0). The training loop calls the same
    methods on every rank and never tests the rank itself, as with TensorBoard's null logger."""

    def say(self, line: str) -> None:
        """A line for the user, on stdout."""

    def warn(self, message: str, *args: object) -> None:
        """A warning, through LOGGER (``message % args``, as logging formats it)."""

    def progress(self, line: str, final: bool = False) -> None:
        """A step line: redrawn on a terminal, plain in logs (:class:`ProgressLine`)."""

    def end_progress(self) -> None:
        """End a redrawn step line, so the next line starts on its own."""


class Console(NullConsole):
    """Rank 0's console."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger
        self.line = ProgressLine()

    def say(self, line: str) -> None:
        print(line, flush=True)

    def warn(self, message: str, *args: object) -> None:
        self.logger.warning(message, *args)

    def progress(self, line: str, final: bool = False) -> None:
        self.line.show(line, final)

    def end_progress(self) -> None:
        self.line.close()


def console(primary: bool, logger: logging.Logger) -> NullConsole:
    """Rank 0 (PRIMARY) shows, every other rank stays quiet: decided once, here."""
    return Console(logger) if primary else NullConsole()
