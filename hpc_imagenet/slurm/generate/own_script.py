"""Batch files for your own training script (``--script PATH [-- ARGS]``): what differs from the engine's files.

Everything else is the engine's file as it is (site options, modules and venv lines, containers, rendezvous, the
signal trap, the restart loop, the start budget). Every rank runs ``python -m hpc_imagenet.requeue SCRIPT ARGS``
(hpc_imagenet/requeue/): it listens for the stop signals before the script imports anything and holds the script
to the requeue contract. The job is requeued when the script stopped at the signal and marked the run folder
(``requeue.requested``); a script that did not stop is ended before the time limit (``stop.ignored``) and the log
says why it was not requeued. Needs no checkout: only PYTHON's environment with hpc_imagenet installed.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional, Sequence

from hpc_imagenet import requeue
from hpc_imagenet.slurm.job import JobError

LAUNCHERS = ("torchrun", "srun")  # one agent per node, or one task per process (as Lightning wants under SLURM)
FRAMEWORKS = ("plain", "lightning")
# Lightning's SLURMEnvironment takes a job with one of these names for an interactive session, and neither
# requeues it nor reads its ranks from SLURM
INTERACTIVE_NAMES = ("bash", "interactive")
# the generator's options that set the engine's training: refused with --script (the script has its own flags)
ENGINE_OPTIONS = ("--data", "--arch", "--epochs", "--batch-size", "--workers", "--stage-dir", "--variant",
                  "--entry", "--sweep", "--recipe")
# a Lightning script's own flags for its layout (Lightning's CLI spells them --trainer.NAME): under srun,
# Lightning's SLURMEnvironment insists that they match the job's tasks per node and nodes
LIGHTNING_LAYOUT = {"devices": ("--devices", "--trainer.devices"),
                    "num_nodes": ("--num-nodes", "--num_nodes", "--trainer.num_nodes")}
MIN_GRACE_S = 10
FAIL = f"exit {requeue.EXIT_DO_NOT_RETRY}"  # a setup mistake: as the engine's files end on one


def refuse_engine_options(argv: Sequence[str]) -> None:
    """One line for a generator option of the engine's training given with --script."""
    given = list(argv[:argv.index("--")] if "--" in argv else argv)
    for option in ENGINE_OPTIONS:
        if any(arg == option or arg.startswith(option + "=") for arg in given):
            raise JobError(f"{option} sets the engine's training, and --script runs your own script: pass the "
                           f"script's own flags after --, e.g. --script train.py -- --epochs 10")


def check(spec) -> None:
    """One line for a --script job that cannot work."""
    if spec.resolved_launcher not in LAUNCHERS:
        raise JobError(f"--launcher {spec.resolved_launcher} with --script: use torchrun (one agent per node) or srun "
                       "(one task per process" + (", as Lightning wants)" if spec.framework == "lightning" else ")"))
    if spec.framework not in FRAMEWORKS:
        raise JobError(f"--framework {spec.framework!r}: choose {' or '.join(FRAMEWORKS)}")
    if spec.framework == "lightning" and spec.name in INTERACTIVE_NAMES:
        raise JobError(f"--name {spec.name}: Lightning takes a job of that name for an interactive session and "
                       "ignores SLURM's ranks; name the job otherwise")
    if spec.on_login_node and not Path(spec.script).is_file():
        raise JobError(f"--script {spec.script}: no such file here; give its path from the folder you submit from")
    if spec.single_process:
        raise JobError(f"--variant {spec.variant} is the engine's; --script runs your script's DDP ranks")
    if spec.framework == "lightning":
        _check_lightning_layout(spec)


def flag_value(args: Sequence[str], names: Sequence[str]) -> Optional[str]:
    """The last value ARGS give any of NAMES (``--name V`` or ``--name=V``), or None."""
    value = None
    for i, arg in enumerate(args):
        name, eq, rest = arg.partition("=")
        if name in names:
            value = rest if eq else (args[i + 1] if i + 1 < len(args) else None)
    return value


def _check_lightning_layout(spec) -> None:
    """One line when the script's own --devices / --num-nodes contradict the job's processes per node / nodes."""
    for field, job_value, option in (("devices", spec.procs, "--procs-per-node" if not spec.gpus_per_node
                                      else "--gpus-per-node"), ("num_nodes", spec.nodes, "--nodes")):
        given = flag_value(spec.train_args, LIGHTNING_LAYOUT[field])
        if given is not None and given.isdigit() and int(given) != job_value:
            raise JobError(f"the script's {field}={given} but the job runs {job_value} (from {option}); Lightning "
                           f"stops at a mismatch under SLURM: pass {option} {given} or the script's "
                           f"{LIGHTNING_LAYOUT[field][0]} {job_value}")


def grace_s(spec) -> int:
    """How long the script has to stop after the signal before it is ended: all but 30 s of the warning."""
    return max(MIN_GRACE_S, spec.signal_seconds - 30)


def settings(spec) -> List[str]:
    return [f"SCRIPT=${{SCRIPT:-{shlex.quote(spec.script)}}}  # your training script, from the folder the job runs in",
            f"export {requeue.RUN_DIR_ENV}=$LOG_DIR  # the run folder the script saves in: the same after a requeue",
            f"export {requeue.GRACE_ENV}=${{{requeue.GRACE_ENV}:-{grace_s(spec)}}}  # seconds to stop after the "
            "signal"]


def setup(spec) -> List[str]:
    lines = [f'[ -f "$SCRIPT" ] || {{ echo "error: no script $SCRIPT in $REPO: submit from the folder its path is '
             f'relative to, or pass --export=ALL,SCRIPT=/path/to/train.py" >&2; {FAIL}; }}']
    if not spec.container:  # an image brings its own Python
        lines.append(f'"$PYTHON" -c "import hpc_imagenet" || {{ echo "error: $PYTHON cannot import hpc_imagenet (the '
                     f'requeue contract): pip install hpc-imagenet there, or pass --export=ALL,PYTHON=..." >&2; '
                     f'{FAIL}; }}')
    return lines


def program() -> str:
    return '-m hpc_imagenet.requeue "$SCRIPT"'


def train_args(spec) -> List[str]:
    lines = ["TRAIN_ARGS=()"]
    if spec.train_args:
        lines.append(f"TRAIN_ARGS+=({' '.join(shlex.quote(a) for a in spec.train_args)})")
    return lines + ["# shellcheck disable=SC2206  # EXTRA_ARGS is split into words on purpose",
                    "TRAIN_ARGS+=($EXTRA_ARGS)"]


def stale_marks() -> str:
    return f'rm -f "$LOG_DIR/{requeue.REQUEUE_MARK}" "$LOG_DIR/{requeue.IGNORED_MARK}"  # the last run\'s answers'


def finish() -> List[str]:
    """Requeue when the script asked for it; otherwise say why not."""
    return [
        "", "# after the signal, requeue when the script stopped and asked for it (hpc_imagenet.requeue.stop);",
        "# finished (0) and do-not-retry (2) scripts are not requeued, nor one that ignored the signal",
        f'if [ "$preempted" = 1 ] && [ -e "$LOG_DIR/{requeue.REQUEUE_MARK}" ]; then',
        '    echo "`date -Is` the script stopped at the stop request (status $status) and asked for a requeue; '
        'requeueing job $SLURM_JOB_ID"',
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
        f'if [ -e "$LOG_DIR/{requeue.IGNORED_MARK}" ]; then',
        '    echo "`date -Is` not requeued: the script did not stop at the stop request, so it does not follow the '
        'requeue contract and a requeue would only start it over (docs/slurm.md, Your own script)"',
        'elif [ "$preempted" = 1 ]; then',
        '    echo "`date -Is` not requeued: the script ended with status $status after the stop request without '
        'asking for a requeue (hpc_imagenet.requeue.stop)"',
        "fi",
        'echo "`date -Is` training exited with status $status"', 'exit "$status"']
