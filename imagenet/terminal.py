"""Whether a progress display may redraw one line (``\\r``) or must print plain lines.

The one test every progress display uses (training, staging, shard conversion). isatty() alone is
the wrong test: Open MPI gives its ranks a pty even when mpirun writes to a batch log, where
``\\r``-ended lines pile up into one line that grep calls binary.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, TextIO

# Set in every SLURM job (whose output is a batch log) and by MPI launchers, which collect and
# relay their ranks' output: a plain line is always safe there.
COLLECTED = ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def overwrite_progress(stream: Optional[TextIO] = None) -> bool:
    """Whether progress written to STREAM (default stdout) may end in \\r, rewriting one terminal
    line, instead of \\n: only on an interactive terminal outside SLURM jobs and MPI launchers."""
    if any(name in os.environ for name in COLLECTED) or os.environ.get("TERM", "dumb") == "dumb":
        return False
    return (stream or sys.stdout).isatty()
