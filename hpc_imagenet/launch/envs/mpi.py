"""Ranks started by an MPI launcher without ``hpc_imagenet.launch.mpi``: Open MPI, MPICH / Intel MPI (hydra), PMIx."""
from __future__ import annotations

import os
from typing import Mapping, Optional

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.errors import LaunchError
from hpc_imagenet.launch.ports import LOOPBACK


class _MpiFamilyEnvironment(ClusterEnvironment):
    """Ranks started by an MPI launcher without ``hpc_imagenet.launch.mpi``: the launcher says who is who, but
    not where rank 0 listens. One node: loopback. Several: MASTER_ADDR must be exported."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.world_size = self._int("world_size")
        self.local_rank = self._int("local_rank", self.rank)
        self.local_world_size = self._int("local_world_size", self.world_size)
        # MPI places ranks in blocks by default (--map-by slot, hydra's default); a round-robin
        # placement only makes this label wrong, not the training
        self.node_rank = self.rank // max(self.local_world_size, 1)
        self.master_addr = self._master_addr()
        self.master_port = self._master_port()

    def _master_addr(self) -> str:
        addr = self.env.get("MASTER_ADDR", "").strip()
        if addr:
            return addr
        return LOOPBACK if self.local_world_size == self.world_size else ""


class OpenMPIEnvironment(_MpiFamilyEnvironment):
    """A rank started by Open MPI's mpirun/mpiexec/prterun."""

    name = "openmpi"
    VARS = {
        "rank": ("OMPI_COMM_WORLD_RANK",),
        "world_size": ("OMPI_COMM_WORLD_SIZE",),
        "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK",),
        "local_world_size": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        # one value per job, the same on every rank (Open MPI 5 / PMIx, then Open MPI 4)
        "job_id": ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"),
    }
    REQUIRED = ("rank", "world_size")
    PROCS_PER_NODE = "mpirun --map-by ppr:{n}:node"


class MPICHEnvironment(_MpiFamilyEnvironment):
    """A rank started by hydra: MPICH's or Intel MPI's mpiexec/mpirun (PMI-1/PMI-2)."""

    name = "mpich"
    VARS = {
        "rank": ("PMI_RANK",),
        "world_size": ("PMI_SIZE",),
        "local_rank": ("MPI_LOCALRANKID",),
        "local_world_size": ("MPI_LOCALNRANKS",),
        "job_id": ("PMI_JOBID", "SLURM_JOB_ID"),  # hydra exports no job id of its own
    }
    REQUIRED = ("rank", "world_size")
    PROCS_PER_NODE = "mpiexec -ppn {n}"


class PMIxEnvironment(_MpiFamilyEnvironment):
    """A rank started by a PMIx launcher other than Open MPI (prun, flux, srun --mpi=pmix inside an
    odd setup). PMIx gives the rank but not the world size in the environment."""

    name = "pmix"
    VARS = {
        "rank": ("PMIX_RANK",),
        "world_size": ("WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"),
        "local_rank": ("LOCAL_RANK", "SLURM_LOCALID"),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "job_id": ("PMIX_NAMESPACE", "SLURM_JOB_ID"),
    }
    REQUIRED = ("rank",)
    PROCS_PER_NODE = "{n} ranks per node"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        env = dict(os.environ if environ is None else environ)
        if self._lookup(env, "world_size") is None:
            raise LaunchError(f"pmix: PMIX_RANK={env['PMIX_RANK']} but the launcher exports no world size: "
                              "start through `python -m hpc_imagenet.launch.mpi SCRIPT ...` (it asks MPI) or export "
                              "WORLD_SIZE")
        super().__init__(env)
