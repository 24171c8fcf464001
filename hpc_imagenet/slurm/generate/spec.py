"""The job a batch file describes: :class:`JobSpec`, the shared job description (hpc_imagenet/slurm/job.py: nodes,
GPUs, processes, CPUs, memory, time, site options, variant, training flags) plus what only a batch file
has (launcher, software setup, settings users override at submit time, requeue, sweep, container), and
the views derived from it (the launcher, tasks per node, the points of a sweep)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from hpc_imagenet.launch import launchers
from hpc_imagenet.slurm import containers, start_budget
from hpc_imagenet.slurm.job import CPUS_PER_PROCESS, JobError, JobShape

__all__ = ["CPUS_PER_PROCESS", "GenerateError", "JobSpec"]

GenerateError = JobError  # a JobSpec that cannot make a working script (one line saying what to change)


@dataclass(frozen=True)
class JobSpec(JobShape):
    """Everything a batch file depends on. Defaults: 1 node x 4 GPUs, DDP, torchrun, requeue on."""

    tasks_per_node: Optional[int] = None  # SLURM tasks; default: 1 per node (torchrun/launch) or 1 per process
    output: Optional[str] = None  # default %x-%j.out (%x-%A_%a.out for sweeps)
    error: Optional[str] = None  # default: with the output
    modules: Tuple[str, ...] = ()  # MODULES default: environment modules to load (MODULES= at submit: none)
    venv: Optional[str] = None  # activated with `source VENV/bin/activate`; relative to the checkout
    conda_env: Optional[str] = None
    setup: Tuple[str, ...] = ()  # shell lines run before training, e.g. "module load cuda/12" (after modules)
    env: Tuple[Tuple[str, str], ...] = ()  # extra exports (NCCL_*, ...), overridable at submit time
    launcher: Optional[str] = None  # default: torchrun for ddp/amp, srun for nd/dp
    mpi_starter: str = "mpirun"  # launcher mpi: mpirun (any MPI that knows SLURM) or srun --mpi=pmix
    python: str = "python"
    # what the job runs: the checkout's entry scripts from $REPO ("checkout"), or the package installed in PYTHON's
    # environment, `python -m hpc_imagenet.imagenet --variant V` from any folder ("installed")
    entry: str = "checkout"
    # your own training script instead of the engine's (hpc_imagenet/slurm/generate/own_script.py): its path from the
    # folder the job runs in; train_args are then its own flags; framework: whose checkpoints and signals it uses
    script: Optional[str] = None
    framework: str = "plain"
    data: Optional[str] = "/path/to/imagenet"  # None: a --script job given no --data
    arch: str = "resnet50"
    epochs: int = 90
    batch_size: int = 256  # per process
    workers: int = 8  # loader processes per training process
    stage_dir: Optional[str] = None  # node-local folder DATA is copied to first; expanded by each process
    requeue: bool = True  # checkpoint and requeue when the signal comes before the time limit
    max_restarts: int = 3  # MAX_RESTARTS default: restarts in a row without a newer checkpoint
    max_starts: int = start_budget.DEFAULT_MAX_STARTS  # MAX_STARTS default: starts in one allocation in all
    signal: str = "USR2"
    signal_seconds: int = 180  # how long before the time limit the signal comes
    sweep: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()  # (SETTING, values): a job array over the product
    container: Optional[str] = None  # the image each job step runs in (hpc_imagenet/slurm/containers.py)
    container_runtime: Optional[str] = None  # default: the one this login node has
    container_mounts: Tuple[str, ...] = ()  # SRC[:DST] mounted besides the checkout
    command: Tuple[str, ...] = field(default=(), compare=False)  # how it was generated, for the header
    # generated on the login node that will submit it (its container runtime is checked); not so for the
    # committed examples, which are written for clusters that have the runtimes this machine may lack
    on_login_node: bool = field(default=True, compare=False)

    # ---- derived views (the shared ones, procs and cpus among them, are JobShape's)

    @property
    def installed(self) -> bool:
        return self.entry == "installed"

    @property
    def resolved_launcher(self) -> str:
        return self.launcher or ("srun" if self.single_process else "torchrun")

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
    def tasks(self) -> int:
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return 1 if self.launcher_entry.batch == launchers.NODE else self.procs

    @property
    def sweep_points(self) -> List[Dict[str, str]]:
        keys = [k for k, _ in self.sweep]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.sweep))]
