"""The exit statuses of a training process: the one home of a contract read by the batch scripts
(hpc_imagenet/slurm/generate/ writes them into every loop), hpc_imagenet.slurm.submit, and the trainers themselves.

Torch-free on purpose: the generator and the submitter import it without the engine.
"""
from __future__ import annotations

import os

EXIT_OK = 0
EXIT_LOST_PEER = 1  # a peer lost in mid-collective (killed, node or network down): worth a restart
EXIT_USAGE = 2  # a user error (flags, data, an unreachable master): a restart would fail the same way
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: a checkpoint was saved, start me again (requeue) to continue
EXIT_INTERRUPTED = 130  # Ctrl-C

# Statuses after which a batch script never starts the training again in the same allocation.
NO_RESTART = (EXIT_OK, EXIT_USAGE, EXIT_PREEMPTED)


def preempted_status() -> int:
    """How a preempted process ends: 75, except under an elastic agent that restarts failed workers (torchrun
    --max-restarts N), which would start it again at once and train on instead of letting the job be requeued:
    0 there ends the agent's run, and the run folder tells the batch file to requeue."""
    return EXIT_OK if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0 else EXIT_PREEMPTED
