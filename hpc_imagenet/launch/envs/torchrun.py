"""torchrun / ``torch.distributed.launch`` workers, and ranks started through ``python -m hpc_imagenet.launch.mpi``
(which
exports torch's variables plus a marker)."""
from __future__ import annotations

from typing import Mapping, Optional

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.errors import LaunchError

MPI_MARKER = "LAUNCH_MPI"  # set by hpc_imagenet.launch.mpi to the MPI library's short name


class TorchElasticEnvironment(ClusterEnvironment):
    """torchrun and ``python -m torch.distributed.launch``: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*."""

    name = "torchrun"
    VARS = {
        "rank": ("RANK",),
        "local_rank": ("LOCAL_RANK",),
        "world_size": ("WORLD_SIZE",),
        "local_world_size": ("LOCAL_WORLD_SIZE",),
        "node_rank": ("GROUP_RANK",),
        "num_nodes": ("GROUP_WORLD_SIZE",),
        "master_addr": ("MASTER_ADDR",),
        "master_port": ("MASTER_PORT",),
    }
    REQUIRED = ("rank", "world_size", "local_rank", "master_addr", "master_port")
    PROCS_PER_NODE = "--nproc-per-node={n}"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.local_rank = self._int("local_rank")
        self.world_size = self._int("world_size")
        # unknown when set by hand: assume no more processes than this rank proves exist
        self.local_world_size = self._int("local_world_size", self.local_rank + 1)
        self.node_rank = self._int("node_rank", self.rank // max(self.local_world_size, 1))
        self.master_addr = self._str("master_addr") or ""
        self.master_port = self._master_port()

    def _check_layout(self) -> None:
        nodes = self._int("num_nodes", 0)
        if nodes and nodes * self.local_world_size != self.world_size:
            raise LaunchError(f"{self.name}: world size {self.world_size} is not {nodes} nodes x "
                              f"{self.local_world_size} processes: give every node the same --nproc-per-node")


class MpiLaunchEnvironment(TorchElasticEnvironment):
    """``python -m hpc_imagenet.launch.mpi`` under mpirun/mpiexec/srun: torch's variables, set by
    hpc_imagenet.launch.mpi.

    Same variables as torchrun, told apart by the marker so run records name the real launcher.
    """

    VARS = {**TorchElasticEnvironment.VARS, "marker": (MPI_MARKER,)}
    REQUIRED = TorchElasticEnvironment.REQUIRED + ("marker",)
    PROCS_PER_NODE = "{n} ranks per node (Open MPI: --map-by ppr:{n}:node; MPICH/Intel MPI: -ppn {n})"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.name = f"mpi/{self._str('marker')}"
