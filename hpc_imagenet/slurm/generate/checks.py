"""The checks a JobSpec passes before it is rendered: each refusal is one line saying what to change."""
from __future__ import annotations

import re
import shlex
from typing import Dict

from hpc_imagenet.slurm.generate import own_script
from hpc_imagenet.launch import launchers
from hpc_imagenet.slurm import containers, job
from hpc_imagenet.slurm.generate.spec import GenerateError, JobSpec
from hpc_imagenet.slurm.job import check_directive, check_signal, check_text, parse_time

__all__ = ["managed_flags", "parse_time", "validate"]

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
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_launcher(spec: JobSpec) -> None:
    """The launcher, tasks per node and MPI starter fit the shape (checked by hpc_imagenet/slurm/job.py before this)."""
    if spec.resolved_launcher not in launchers.in_batch_files():
        raise GenerateError(f"unknown launcher {spec.resolved_launcher!r}; choose one of "
                            f"{', '.join(launchers.in_batch_files())}")
    if spec.single_process:
        if spec.resolved_launcher != "srun":
            raise GenerateError(f"the {spec.variant} variant is one process; use --launcher srun, "
                                f"not {spec.resolved_launcher}")
        if spec.tasks != 1:
            raise GenerateError(f"the {spec.variant} variant is one process; drop --tasks-per-node {spec.tasks}")
        return
    if spec.launcher_entry.batch == launchers.NODE and spec.tasks != 1:
        raise GenerateError(f"the {spec.resolved_launcher} launcher runs one task per node that starts "
                            f"{spec.procs} processes; drop --tasks-per-node {spec.tasks} (or use --launcher srun)")
    if spec.launcher_entry.batch == launchers.PROCESS and spec.tasks != spec.procs:
        what = f"--gpus-per-node {spec.gpus_per_node}" if spec.gpus_per_node else f"--procs-per-node {spec.procs}"
        raise GenerateError(f"--tasks-per-node {spec.tasks} does not match {what}: the {spec.resolved_launcher} "
                            f"launcher starts one task per GPU, so use --tasks-per-node {spec.procs}")
    if spec.mpi_starter not in MPI_STARTERS:
        raise GenerateError(f"unknown --mpi-starter {spec.mpi_starter!r}; choose mpirun or srun")


def _check_values(spec: JobSpec) -> None:
    """The batch file's own values (the shared ones are checked by hpc_imagenet/slurm/job.py)."""
    for label, value in (("--output", spec.output), ("--error", spec.error)):
        if value is not None:
            check_directive(label, value)
    for label, value in (("--module", m) for m in spec.modules):
        check_text(label, value)
        if not value.strip() or any(c.isspace() for c in value):
            raise GenerateError(f"--module {value!r} must be one module name (repeat --module for more)")
    for line in spec.setup:
        check_text("--setup", line)
        if not line.strip():
            raise GenerateError("--setup lines must not be empty")
    for label, value in (("--venv", spec.venv), ("--conda-env", spec.conda_env), ("--python", spec.python),
                         ("--data", spec.data), ("--arch", spec.arch), ("--stage-dir", spec.stage_dir)):
        if value is not None:
            check_text(label, value)
            if not value:
                raise GenerateError(f"{label} must not be empty")
    for name, value in spec.env:
        if not _ENV_NAME.fullmatch(name) or name in SETTINGS:
            raise GenerateError(f"--env {name!r}: need NAME=VALUE with a shell variable name other than "
                                f"{', '.join(SETTINGS)}")
        check_text(f"--env {name}", value)
    for number, label in ((spec.epochs, "--epochs"), (spec.batch_size, "--batch-size")):
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
    if spec.signal not in SIGNALS:
        raise GenerateError(f"--signal {spec.signal!r}: choose USR1 or USR2 (the trainers also stop on TERM)")
    if spec.requeue:
        check_signal("--signal-seconds", spec.signal_seconds, spec.time)


def _check_sweep(spec: JobSpec) -> None:
    for key, values in spec.sweep:
        if key not in SWEEPABLE:
            raise GenerateError(f"--sweep {key}: sweep one of {', '.join(SWEEPABLE)} "
                                "(submit one job per point to vary nodes: python -m hpc_imagenet.slurm.submit --sweep)")
        if not values or any(not v for v in values):
            raise GenerateError(f"--sweep {key} needs comma-separated non-empty values")
        for v in values:
            check_text(f"--sweep {key}", v)


def managed_flags() -> Dict[str, str]:
    """Each training flag (every spelling the trainers accept) of a setting the generator sets itself
    -> the generator option to use instead."""
    return job.managed_flags(MANAGED)


def _check_train_args(spec: JobSpec) -> None:
    job.check_unmanaged(spec.train_args, MANAGED, "a generator setting",
                        "it becomes a variable sbatch --export can override")
    from hpc_imagenet.imagenet import config  # only the flag table; no torch import

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
        check_text(label, value)
        if not value.strip() or "," in value or any(c.isspace() for c in value):
            raise GenerateError(f"{label} {value!r} must be one path or reference without spaces or commas")
    try:
        containers.check(spec.resolved_runtime, spec.container, spec.container_mounts, spec.data, spec.stage_dir,
                         spec.resolved_launcher, spec.mpi_starter, here=spec.on_login_node)
    except containers.ContainerError as e:
        raise GenerateError(str(e)) from None


def validate(spec: JobSpec) -> None:
    """Raise GenerateError (one line) for any spec that cannot make a working script."""
    job.check_layout(spec)
    _check_launcher(spec)
    job.check_resources(spec)
    _check_values(spec)
    _check_requeue(spec)
    _check_sweep(spec)
    if spec.script is not None:
        own_script.check(spec)  # its flags are the script's own, not the engine's
    else:
        if spec.framework != "plain":
            raise GenerateError(f"--framework {spec.framework} is for your own training script: add --script PATH, or "
                                "drop --framework for the engine's training")
        _check_train_args(spec)
    _check_container(spec)
