"""Batch files for your own training script (``--script PATH [-- ARGS]``): what differs from the engine's files.

Everything else is the engine's file as it is (site options, modules and venv lines, containers, rendezvous, the
signal trap, the restart loop, the start budget). Every rank runs ``python -m hpc_imagenet.requeue SCRIPT ARGS``
(hpc_imagenet/requeue/): it listens for the stop signals before the script imports anything and holds the script
to the requeue contract. The job is requeued when the script stopped at the signal and marked the run folder
(``requeue.requested``); a script that did not stop is ended before the time limit (``stop.ignored``) and the log
says why it was not requeued. Needs no checkout: only PYTHON's environment with hpc_imagenet installed.

``--framework lightning-native`` leaves the stop to Lightning's own SLURM auto-requeue instead (srun only): every
task runs the script itself, the time-limit signal reaches the tasks as Lightning's requeue signal (SIGUSR1), and
Lightning saves its ``hpc_ckpt_N.ckpt`` in the run folder and runs ``scontrol requeue``. That ``scontrol`` is a
stand-in the batch file puts first on the tasks' PATH (an image usually has none): it marks the run folder, and the
batch script requeues the job from the host. Lightning restores the checkpoint itself on the next start.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional, Sequence

from hpc_imagenet import requeue
from hpc_imagenet.slurm.job import JobError

LAUNCHERS = ("torchrun", "srun")  # one agent per node, or one task per process (as Lightning wants under SLURM)
FRAMEWORKS = ("plain", "lightning", "lightning-native")
NATIVE = "lightning-native"
NATIVE_SIGNAL = "USR1"  # Lightning's SLURMEnvironment requeue_signal (its default)
# Lightning's SLURMEnvironment takes a job with one of these names for an interactive session, and neither
# requeues it nor reads its ranks from SLURM
INTERACTIVE_NAMES = ("bash", "interactive")
# the generator's options that set the engine's training: refused with --script (the script has its own flags)
ENGINE_OPTIONS = ("--arch", "--epochs", "--batch-size", "--workers", "--variant", "--entry", "--sweep", "--recipe")
# a Lightning script's own flags for its layout (Lightning's CLI spells them --trainer.NAME): under srun,
# Lightning's SLURMEnvironment insists that they match the job's tasks per node and nodes
LIGHTNING_LAYOUT = {"devices": ("--devices", "--trainer.devices"),
                    "num_nodes": ("--num-nodes", "--num_nodes", "--trainer.num_nodes")}
MIN_GRACE_S = 10
STAND_IN_DIR = ".lightning-requeue"  # in the run folder: the tasks' scontrol stand-in (lightning-native)
FAIL = f"exit {requeue.EXIT_DO_NOT_RETRY}"  # a setup mistake: as the engine's files end on one


def given(argv: Sequence[str], option: str) -> bool:
    """Whether the generator's own options (those before ``--``) in ARGV include OPTION."""
    own = list(argv[:argv.index("--")] if "--" in argv else argv)
    return any(arg == option or arg.startswith(option + "=") for arg in own)


def refuse_engine_options(argv: Sequence[str]) -> None:
    """One line for a generator option of the engine's training given with --script."""
    for option in ENGINE_OPTIONS:
        if given(argv, option):
            raise JobError(f"{option} sets the engine's training, and --script runs your own script: pass the "
                           f"script's own flags after --, e.g. --script train.py -- --epochs 10")


def check(spec) -> None:
    """One line for a --script job that cannot work."""
    if spec.resolved_launcher not in LAUNCHERS:
        raise JobError(f"--launcher {spec.resolved_launcher} with --script: use torchrun (one agent per node) or srun "
                       "(one task per process" + (", as Lightning wants)" if spec.framework == "lightning" else ")"))
    if spec.framework not in FRAMEWORKS:
        raise JobError(f"--framework {spec.framework!r}: choose {' or '.join(FRAMEWORKS)}")
    if spec.framework == NATIVE and spec.resolved_launcher != "srun":
        raise JobError(f"--framework {NATIVE} with --launcher {spec.resolved_launcher}: Lightning's own requeue works "
                       "only under srun (SLURMEnvironment); use --launcher srun, or --framework lightning (the "
                       "callback) under torchrun")
    if spec.framework != "plain" and spec.name in INTERACTIVE_NAMES:
        raise JobError(f"--name {spec.name}: Lightning takes a job of that name for an interactive session and "
                       "ignores SLURM's ranks; name the job otherwise")
    if spec.on_login_node and not Path(spec.script).is_file():
        raise JobError(f"--script {spec.script}: no such file here; give its path from the folder you submit from")
    if spec.single_process:
        raise JobError(f"--variant {spec.variant} is the engine's; --script runs your script's DDP ranks")
    if spec.framework != "plain":
        _check_lightning_layout(spec)
    if spec.stage_dir:
        _check_staging(spec)


def _check_staging(spec) -> None:
    """One line for a --stage-dir the script could not read its node's copy from."""
    if not spec.data:
        raise JobError("--stage-dir copies --data to each node: give --data DIR too (the dataset folder your "
                       "script reads; it finds its node's copy in $HPC_IMAGENET_DATA)")
    if spec.framework == NATIVE:
        raise JobError(f"--stage-dir with --framework {NATIVE}: its tasks run the script alone, without the runner "
                       "that finds each node's copy; use --framework lightning (the callback), or drop --stage-dir")
    if spec.stage_dir.rstrip("/").startswith("/dev/shm"):
        raise JobError(f"--stage-dir {spec.stage_dir}: a copy in shared memory holds the node's memory after your "
                       "script ends, and nothing removes it: stage to node-local disk, e.g. --stage-dir '$TMPDIR'")


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
    lines = [f"SCRIPT=${{SCRIPT:-{shlex.quote(spec.script)}}}  # your training script, from the folder the job runs in",
             f"export {requeue.RUN_DIR_ENV}=$LOG_DIR  # the run folder the script saves in: the same after a requeue",
             f"export {requeue.GRACE_ENV}=${{{requeue.GRACE_ENV}:-{grace_s(spec)}}}  # seconds to stop after the "
             "signal"]
    if spec.data:
        lines += [f"DATA=${{DATA:-{shlex.quote(spec.data)}}}  # the dataset folder your script reads",
                  f"export {requeue.DATA_ENV}=$DATA  # where the script finds it"
                  + (" (each node's own copy: see staging)" if spec.stage_dir else "")]
    return lines


def exported(spec) -> List[str]:
    """The variables of the contract the file exports: a container runtime passes them into the image by name."""
    return [requeue.RUN_DIR_ENV, requeue.GRACE_ENV, *([requeue.DATA_ENV] if spec.data else []),
            *([requeue.STAGE_DIR_ENV] if spec.stage_dir else [])]


def staging(spec, srun: str) -> List[str]:
    """With --stage-dir: SRUN (one task a node) copies DATA to each node before the script's first start (the
    engine's trainers stage for themselves)."""
    if not (spec.script and spec.stage_dir):
        return []
    return ["", "# ---- staging: each node copies DATA into its own STAGE_DIR (expanded there: $TMPDIR is the node's)",
            "# before the script starts; a requeue finds the copies complete and reuses them. The runner gives the",
            f"# script its node's copy in ${requeue.DATA_ENV} (hpc_imagenet.requeue.data_dir())",
            f'{srun} "$PYTHON" -m hpc_imagenet.imagenet.data.staging "$DATA" "$STAGE_DIR" || {{ echo "error: staging '
            '$DATA into $STAGE_DIR failed on a node (its line is above): free space there, or pass --export=ALL,'
            f'STAGE_DIR=/another/node-local/folder" >&2; {FAIL}; }}',
            f"export {requeue.STAGE_DIR_ENV}=$STAGE_DIR"]


def setup(spec) -> List[str]:
    lines = [f'[ -f "$SCRIPT" ] || {{ echo "error: no script $SCRIPT in $REPO: submit from the folder its path is '
             f'relative to, or pass --export=ALL,SCRIPT=/path/to/train.py" >&2; {FAIL}; }}']
    if spec.framework == NATIVE:  # the tasks run the script alone: nothing of hpc_imagenet on them
        return lines + _scontrol_stand_in()
    if not spec.container:  # an image brings its own Python
        lines.append(f'"$PYTHON" -c "import hpc_imagenet" || {{ echo "error: $PYTHON cannot import hpc_imagenet (the '
                     f'requeue contract): pip install hpc-imagenet there, or pass --export=ALL,PYTHON=..." >&2; '
                     f'{FAIL}; }}')
    return lines


def _scontrol_stand_in() -> List[str]:
    return ["# Lightning's auto-requeue runs `scontrol requeue JOB` on rank 0 once its checkpoint is saved; the tasks",
            "# find this stand-in first on their PATH (an image usually has no scontrol): it marks the run folder,",
            "# and this script requeues the job from the host (on_preempt)",
            f'REQUEUE_BIN="$LOG_DIR/{STAND_IN_DIR}"',
            # made afresh and private: nothing planted there (a link, another user's file) runs as the job
            f'{{ rm -rf "$REQUEUE_BIN" && mkdir -p "$LOG_DIR" && mkdir -m 700 "$REQUEUE_BIN"; }} || {{ echo "error: '
            f'cannot make $REQUEUE_BIN: pass --export=ALL,LOG_DIR=/a/writable/folder" >&2; {FAIL}; }}',
            "cat > \"$REQUEUE_BIN/scontrol\" <<'STAND_IN'",
            "#!/bin/sh",
            '[ "$1" = requeue ] || { echo "scontrol $*: this stand-in answers only Lightning\'s requeue" >&2; '
            'exit 1; }',
            f': > "${requeue.RUN_DIR_ENV}/{requeue.REQUEUE_MARK}"',
            "STAND_IN",
            'chmod +x "$REQUEUE_BIN/scontrol"']


def program(spec) -> str:
    return '-u "$SCRIPT"' if spec.framework == NATIVE else '-m hpc_imagenet.requeue "$SCRIPT"'


def task_environment(spec) -> str:
    """What goes before the tasks' srun: the scontrol stand-in first on their PATH (lightning-native)."""
    return 'PATH="$REQUEUE_BIN:$PATH" ' if spec.framework == NATIVE else ""


def forwarded_signal(spec) -> str:
    """The signal the trap sends the tasks: Lightning's requeue signal for lightning-native, else the job's own."""
    return NATIVE_SIGNAL if spec.framework == NATIVE else spec.signal


def on_preempt(spec) -> List[str]:
    """lightning-native: in the background, requeue from the host once Lightning marked its checkpoint saved; end
    the training when it has not within the grace, so that the job ends before its time limit."""
    if spec.framework != NATIVE:
        return []
    return ["    native_requeue &"]


def native_requeue(spec) -> List[str]:
    if spec.framework != NATIVE:
        return []
    return [
        "native_requeue() {",
        "    waited=0",
        f'    while [ ! -e "$LOG_DIR/{requeue.REQUEUE_MARK}" ]; do',
        f'        if [ "$waited" -ge "${requeue.GRACE_ENV}" ]; then',
        f'            echo "`date -Is` Lightning did not save its checkpoint within ${requeue.GRACE_ENV} s of the '
        "signal (it saves inside its signal handler, where ranks that took the signal at different collectives "
        'wait on each other for ever; --framework lightning does not); ending the training before the time limit"',
        f'            : > "$LOG_DIR/{requeue.IGNORED_MARK}"; scancel --signal=KILL "$SLURM_JOB_ID"; return',
        "        fi",
        "        sleep 1; waited=$((waited + 1))",
        "    done",
        '    echo "`date -Is` Lightning saved its checkpoint and asked for a requeue; requeueing job $SLURM_JOB_ID '
        'from the host"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "}"]


def train_args(spec) -> List[str]:
    lines = ["TRAIN_ARGS=()"]
    if spec.train_args:
        lines.append(f"TRAIN_ARGS+=({' '.join(shlex.quote(a) for a in spec.train_args)})")
    return lines + ["# shellcheck disable=SC2206  # EXTRA_ARGS is split into words on purpose",
                    "TRAIN_ARGS+=($EXTRA_ARGS)"]


def stale_marks() -> str:
    return f'rm -f "$LOG_DIR/{requeue.REQUEUE_MARK}" "$LOG_DIR/{requeue.IGNORED_MARK}"  # the last run\'s answers'


def finish(spec) -> List[str]:
    """Requeue when the script asked for it; otherwise say why not."""
    asks = "Lightning's requeue (its scontrol stand-in)" if spec.framework == NATIVE else "hpc_imagenet.requeue.stop"
    ignored = ("Lightning did not save its checkpoint within the grace after the signal, so a requeue would only "
               "start it over" if spec.framework == NATIVE else "the script did not stop at the stop request, so it "
               "does not follow the requeue contract and a requeue would only start it over")
    return [
        "", f"# after the signal, requeue when the script stopped and asked for it ({asks});",
        "# finished (0) and do-not-retry (2) scripts are not requeued, nor one that ignored the signal",
        f'if [ "$preempted" = 1 ] && [ -e "$LOG_DIR/{requeue.REQUEUE_MARK}" ]; then',
        '    echo "`date -Is` the script stopped at the stop request (status $status) and asked for a requeue; '
        'requeueing job $SLURM_JOB_ID"',
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
        f'if [ -e "$LOG_DIR/{requeue.IGNORED_MARK}" ]; then',
        f'    echo "`date -Is` not requeued: {ignored} (docs/slurm.md, Your own script)"',
        'elif [ "$preempted" = 1 ]; then',
        '    echo "`date -Is` not requeued: the script ended with status $status after the stop request without '
        f'asking for a requeue ({asks})"',
        "fi",
        'echo "`date -Is` training exited with status $status"', 'exit "$status"']
