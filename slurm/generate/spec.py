"""The job a batch file describes: :class:`JobSpec` (frozen, every field with its default) and the views
derived from it (the launcher, processes and tasks per node, CPUs per task, the points of a sweep)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from imagenet.common.variants import SINGLE_PROCESS
from launch import launchers
from slurm import containers, start_budget

CPUS_PER_PROCESS = 8


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

