"""Run a per-node launcher agent (torchrun, torch.distributed.launch) so that stop signals wait
for the trainers instead of being lost or acted on by the agent.

    python -m hpc_imagenet.launch.agent torch.distributed.run --nnodes=4 --nproc_per_node=4 ... SCRIPT ARGS

In a batch job SLURM (and the batch script's forward) signals every process of the job step,
the agent included. The agent must not act on SIGUSR1/SIGUSR2/SIGTERM: USR2 would kill it, and
torchrun's own SIGTERM handling re-sends the signal and kills its workers after a timeout, cutting
the checkpoint short. Ignoring them (``trap ""``) is not enough either: workers inherit an ignored
disposition and lose every stop signal until they install their handler (imports, dataset scan).

So the agent BLOCKS them and resets them to their default action. Blocked signals stay pending,
and the signal mask is inherited across fork and exec: a worker keeps any stop signal that comes
while it starts, and gets it the moment it installs its handler and unblocks them
(``hpc_imagenet.imagenet.process.preemption``). The agent itself never receives them; SLURM's SIGKILL still ends it.
Start it from ``bash -c 'trap "" USR2 TERM; exec python -m hpc_imagenet.launch.agent ...'`` so no signal can
kill it during its own interpreter start-up (ignored until blocked here).
"""
from __future__ import annotations

import runpy
import signal
import sys

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)  # hpc_imagenet.imagenet.process.preemption's list
USAGE = ("usage: python -m hpc_imagenet.launch.agent MODULE [ARGS...]  (e.g. torch.distributed.run --nproc_per_node=4 "
         "...)")


def hold_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # first: from here on they stay pending
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)  # not ignored: an ignored signal is not inherited as pending


def main() -> int:
    hold_stop_signals()
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(f"error: {USAGE}", file=sys.stderr)
        return 2
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    from hpc_imagenet.launch.agent import main  # under its one name, not a copy
    sys.exit(main())
