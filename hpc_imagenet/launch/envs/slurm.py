"""A task of an ``srun`` step, read from SLURM's variables."""
from __future__ import annotations

from typing import Mapping, Optional

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.errors import LaunchError
from hpc_imagenet.launch.hostlist import expand_hostlist, expand_tasks_per_node
from hpc_imagenet.launch.ports import LOOPBACK


class SlurmEnvironment(ClusterEnvironment):
    """One task of an ``srun`` step (one task per GPU). The batch shell itself is not a task:
    ``python train.py`` typed straight into an sbatch script falls through to single process."""

    name = "slurm"
    VARS = {
        "rank": ("SLURM_PROCID",),
        "local_rank": ("SLURM_LOCALID",),
        # the step's own counts first: `srun -n 2` inside a bigger allocation runs 2 tasks
        "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
        "node_rank": ("SLURM_NODEID",),
        "num_nodes": ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        "ntasks_per_node": ("SLURM_NTASKS_PER_NODE",),
        "nodelist": ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
        "gpus_per_task": ("SLURM_GPUS_PER_TASK",),
        # present when SLURM allocated GPUs to the job (--gpus-per-node, --gres=gpu:N)
        "gpus_allocated": ("SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
        # only srun sets this one; the batch shell has SLURM_PROCID=0 but no step
        "srun_step": ("SLURM_STEP_NUM_TASKS",),
    }
    REQUIRED = ("rank", "local_rank", "world_size", "srun_step")
    PROCS_PER_NODE = "#SBATCH --ntasks-per-node={n} (one task per GPU)"
    # MPI launchers started inside an allocation leave SLURM's variables of THEIR daemons behind
    _MPI_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    _MPI_RANKS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        if not super().detect(environ):
            return False
        # mpirun inside an allocation starts its daemons with srun; the ranks inherit the
        # daemons' SLURM_PROCID, which is not their rank. Trust SLURM only if MPI agrees.
        size, rank = cls._lookup(environ, "world_size"), cls._lookup(environ, "rank")
        return (all(environ.get(k, size).strip() == size for k in cls._MPI_SIZES)
                and all(environ.get(k, rank).strip() == rank for k in cls._MPI_RANKS))

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.local_rank = self._int("local_rank")
        self.world_size = self._int("world_size")
        self.node_rank = self._int("node_rank", 0)
        self.num_nodes = self._int("num_nodes", 1)
        self.local_world_size = self._local_world_size()
        self.master_addr = self.env.get("MASTER_ADDR", "").strip() or self._first_host()
        self.master_port = self._master_port()

    def _local_world_size(self) -> int:
        spec = self._str("tasks_per_node")
        if spec:
            counts = expand_tasks_per_node(spec)
            if self.node_rank < len(counts):
                return counts[self.node_rank]
        return self._int("ntasks_per_node", max(self.world_size // max(self.num_nodes, 1), 1))

    def _first_host(self) -> str:
        spec = self._str("nodelist")
        return expand_hostlist(spec)[0] if spec else LOOPBACK

    def _check_layout(self) -> None:
        per_node = self._int("ntasks_per_node", 0)
        if per_node and per_node * self.num_nodes != self.world_size:
            raise LaunchError(f"slurm: the step runs {self.world_size} tasks but {self.num_nodes} nodes x "
                              f"--ntasks-per-node={per_node} = {per_node * self.num_nodes}: drop -n/--ntasks "
                              f"(or set it to {per_node * self.num_nodes}) so every node runs "
                              f"{per_node} tasks")

    def _gpus_bound_per_task(self, gpus: int) -> bool:
        """--gpus-per-task=1 makes SLURM show each task only its own GPU: it is device 0."""
        per_task = self._str("gpus_per_task", "")
        digits = per_task.rpartition(":")[2]  # "1" or "gpu:1" / "a100:1"
        return digits.isdigit() and int(digits) == gpus

    def _check_gpus(self, gpus: int) -> None:
        if self._gpus_bound_per_task(gpus):
            self._bound_device = 0
            return
        # more tasks than GPUs never works; fewer wastes GPUs SLURM gave this job (GPUs merely
        # visible on a shared node without GPU allocation may belong to someone else: warn only)
        allocated = self._str("gpus_allocated") is not None
        if self.local_world_size > gpus or (allocated and self.local_world_size < gpus):
            raise LaunchError(f"slurm: {self.local_world_size} task(s) on node {self.node_rank} but it has {gpus} "
                              f"GPU(s): use {self._procs_hint(gpus)} with --gpus-per-node={gpus}")
        super()._check_gpus(gpus)
