"""Where this process sits in the job: cluster environments, each a small class with ``detect()``.

The engine calls :func:`detect` and never cares which launcher started it. Detection order:
torchrun/torch.distributed.launch first (it also runs inside SLURM and MPI allocations), then
single process.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional


class LaunchError(RuntimeError):
    """The launch environment is inconsistent; the message says what to change."""


class ClusterEnvironment:
    """Rank layout of one process. Subclasses read it from their launcher's variables."""

    name = "base"

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        self.env = dict(os.environ if environ is None else environ)

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        raise NotImplementedError

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int

    def validate(self, gpus_per_node: int = 0) -> None:
        """Raise LaunchError with a one-line hint when the layout cannot work."""
        if not 0 <= self.rank < self.world_size:
            raise LaunchError(f"rank {self.rank} is outside world size {self.world_size}")
        if gpus_per_node and self.local_rank >= gpus_per_node:
            raise LaunchError(f"local rank {self.local_rank} has no GPU: this node has {gpus_per_node}; "
                              f"start at most {gpus_per_node} processes per node")

    def describe(self) -> str:
        return (f"{self.name}: rank {self.rank}/{self.world_size} local {self.local_rank}/"
                f"{self.local_world_size} node {self.node_rank} master {self.master_addr}:{self.master_port}")


class TorchElasticEnvironment(ClusterEnvironment):
    """torchrun and ``python -m torch.distributed.launch``: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*."""

    name = "torchrun"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return all(k in environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        e = self.env
        self.rank = int(e["RANK"])
        self.local_rank = int(e["LOCAL_RANK"])
        self.world_size = int(e["WORLD_SIZE"])
        self.local_world_size = int(e.get("LOCAL_WORLD_SIZE", 1))
        self.node_rank = int(e.get("GROUP_RANK", self.rank // max(self.local_world_size, 1)))
        self.master_addr = e["MASTER_ADDR"]
        self.master_port = int(e["MASTER_PORT"])


class SingleProcessEnvironment(ClusterEnvironment):
    """No launcher: one process, rank 0 of 1."""

    name = "single"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return True

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        super().__init__(environ)
        self.rank = self.local_rank = self.node_rank = 0
        self.world_size = self.local_world_size = 1
        self.master_addr = "127.0.0.1"
        self.master_port = int(self.env.get("MASTER_PORT", 29500))


ENVIRONMENTS = (TorchElasticEnvironment, SingleProcessEnvironment)


def detect(environ: Optional[Mapping[str, str]] = None) -> ClusterEnvironment:
    """The first environment whose variables are present (torchrun first, single process last)."""
    env = os.environ if environ is None else environ
    for cls in ENVIRONMENTS:
        if cls.detect(env):
            return cls(env)
    raise AssertionError("unreachable: SingleProcessEnvironment always matches")
