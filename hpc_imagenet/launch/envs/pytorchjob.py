"""A pod of Kubeflow's PyTorchJob that runs the training script itself."""
from __future__ import annotations

from typing import Mapping, Optional

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.errors import LaunchError


class PyTorchJobEnvironment(ClusterEnvironment):
    """A pod of Kubeflow's PyTorchJob that runs the script itself: one process per pod.

    The operator gives each pod MASTER_ADDR (the master pod's service), MASTER_PORT, WORLD_SIZE
    (the number of pods) and RANK (the pod's index), but no LOCAL_RANK: each pod is a node with
    one process, local rank 0. A pod whose command is torchrun gets torchrun's variables instead.
    """

    name = "pytorchjob"
    VARS = {
        "rank": ("RANK",),
        "world_size": ("WORLD_SIZE",),
        "master_addr": ("MASTER_ADDR",),
        "master_port": ("MASTER_PORT",),
        # torchelastic's own variables: present means torchrun started us (TorchElasticEnvironment)
        "elastic": ("LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE"),
        # the operator's processes-per-pod request (nprocPerNode), meant for torchrun in the pod
        "nproc_per_pod": ("PET_NPROC_PER_NODE",),
    }
    REQUIRED = ("rank", "world_size", "master_addr", "master_port")
    PROCS_PER_NODE = ("{n} processes per pod (container command `torchrun --nproc-per-node={n} ...`, "
                      "PyTorchJob nprocPerNode: {n})")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return super().detect(environ) and cls._lookup(environ, "elastic") is None

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self._int("rank")
        self.world_size = self._int("world_size")
        self.local_rank, self.local_world_size = 0, 1
        self.node_rank = self.rank  # one process per pod: the pod's index is the node's
        self.master_addr = self._str("master_addr") or ""
        self.master_port = self._master_port()

    def _check_layout(self) -> None:
        wanted = self._str("nproc_per_pod", "1")
        if wanted.isdigit() and int(wanted) > 1:
            raise LaunchError(f"pytorchjob: the job asks for {wanted} processes per pod (PET_NPROC_PER_NODE) "
                              f"but the pod ran the script directly, as one process: make the container "
                              f"command `torchrun --nproc-per-node={wanted} SCRIPT ...`")
