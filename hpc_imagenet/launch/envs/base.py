"""The base class of every cluster environment: the variable table (role -> candidate names), the rank checks
and the one-line hints. A launcher's own module subclasses it (see :mod:`hpc_imagenet.launch.envs`)."""
from __future__ import annotations

import logging
import os
from typing import ClassVar, Dict, Mapping, Optional, Tuple

from hpc_imagenet.launch.errors import LaunchError
from hpc_imagenet.launch.ports import DEFAULT_PORT, derive_port

log = logging.getLogger(__name__)


class ClusterEnvironment:
    """Rank layout of one process. Subclasses read it from their launcher's variables.

    ``VARS`` maps a role to the variable names that may carry it (first present wins);
    ``REQUIRED`` lists the roles whose presence identifies the launcher.
    """

    name: ClassVar[str] = "base"
    VARS: ClassVar[Dict[str, Tuple[str, ...]]] = {}
    REQUIRED: ClassVar[Tuple[str, ...]] = ()
    # How to ask this launcher for N processes per node ({n} is filled in by the hints).
    PROCS_PER_NODE: ClassVar[str] = "{n} processes per node"

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        self.env = dict(os.environ if environ is None else environ)
        self._bound_device: Optional[int] = None  # set when the launcher gives each task its own GPU

    @property
    def device_index(self) -> int:
        """The CUDA device this process uses: its local rank, unless SLURM bound one GPU per task."""
        return self.local_rank if self._bound_device is None else self._bound_device

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return all(cls._lookup(environ, role) is not None for role in cls.REQUIRED)

    # -- reading the table
    @classmethod
    def _lookup(cls, environ: Mapping[str, str], role: str) -> Optional[str]:
        for key in cls.VARS.get(role, ()):
            value = environ.get(key)
            if value is not None and value.strip() != "":
                return value.strip()
        return None

    def _str(self, role: str, default: Optional[str] = None) -> Optional[str]:
        value = self._lookup(self.env, role)
        return default if value is None else value

    def _int(self, role: str, default: Optional[int] = None) -> int:
        value = self._lookup(self.env, role)
        if value is None:
            if default is None:
                names = " or ".join(self.VARS.get(role, (role,)))
                raise LaunchError(f"{self.name}: {names} is not set; was this process started by the launcher?")
            return default
        try:
            return int(value)
        except ValueError:
            key = next(k for k in self.VARS[role] if self.env.get(k, "").strip() == value)
            raise LaunchError(f"{self.name}: {key}={value!r} is not an integer") from None

    def _master_port(self) -> int:
        """MASTER_PORT if set, else one derived from the job id, else torch's default."""
        if self.env.get("MASTER_PORT", "").strip():
            try:
                return int(self.env["MASTER_PORT"])
            except ValueError:
                raise LaunchError(f"MASTER_PORT={self.env['MASTER_PORT']!r} is not a port number") from None
        job_id = self._str("job_id")
        return derive_port(job_id) if job_id else DEFAULT_PORT

    # -- checks
    def validate(self, gpus_per_node: int = 0) -> None:
        """Raise LaunchError with a one-line hint when the layout cannot work."""
        self._check_ranks()
        self._check_layout()
        self._check_master()
        if gpus_per_node:
            self._check_gpus(gpus_per_node)

    def _check_ranks(self) -> None:
        if self.world_size < 1:
            raise LaunchError(f"{self.name}: world size {self.world_size} must be at least 1")
        if not 0 <= self.rank < self.world_size:
            raise LaunchError(f"{self.name}: rank {self.rank} is outside world size {self.world_size}; "
                              "the launcher's variables disagree (are two launchers nested?)")
        if not 1 <= self.local_world_size <= self.world_size:
            raise LaunchError(f"{self.name}: {self.local_world_size} processes on this node but "
                              f"{self.world_size} in the whole job; the launcher's variables disagree")
        if not 0 <= self.local_rank < self.local_world_size:
            raise LaunchError(f"{self.name}: local rank {self.local_rank} is outside the "
                              f"{self.local_world_size} processes on this node")

    def _check_layout(self) -> None:
        """Launcher-specific consistency of nodes x processes (subclasses override)."""

    def _check_master(self) -> None:
        if not self.master_addr:
            raise LaunchError(f"{self.name}: ranks span several nodes and MASTER_ADDR is unset: start "
                              "through `python -m hpc_imagenet.launch.mpi SCRIPT ...` (it finds rank 0's address) or "
                              "export MASTER_ADDR=<rank 0's host> to every rank")
        if not 0 < self.master_port < 65536:
            raise LaunchError(f"{self.name}: master port {self.master_port} is not in 1-65535; set MASTER_PORT")

    def _procs_hint(self, procs: int) -> str:
        return self.PROCS_PER_NODE.format(n=procs)

    def _check_gpus(self, gpus: int) -> None:
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        seen = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        if self.device_index >= gpus:
            raise LaunchError(f"{self.name}: local rank {self.local_rank} would use GPU {self.device_index} but "
                              f"only {gpus} are visible{seen}: start {self._procs_hint(gpus)}")
        if self.local_world_size > gpus:
            raise LaunchError(f"{self.name}: {self.local_world_size} processes on this node but only {gpus} "
                              f"GPU(s) visible{seen}: start one process per GPU, {self._procs_hint(gpus)}")
        if self.local_world_size < gpus:
            log.warning("%s: %d process(es) on this node leave %d of %d GPUs idle; use %s",
                        self.name, self.local_world_size, gpus - self.local_world_size, gpus,
                        self._procs_hint(gpus))

    def describe(self) -> str:
        return (f"{self.name}: rank {self.rank}/{self.world_size} local {self.local_rank}/"
                f"{self.local_world_size} node {self.node_rank} master {self.master_addr}:{self.master_port}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"
