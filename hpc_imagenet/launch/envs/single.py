"""No launcher: one process, rank 0 of 1 (also the fallback of :func:`hpc_imagenet.launch.environment.detect`)."""
from __future__ import annotations

import logging
from typing import Mapping, Optional

from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.ports import LOOPBACK

log = logging.getLogger(__name__)


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
        self.master_addr = LOOPBACK
        self.master_port = self._master_port()

    def validate(self, gpus_per_node: int = 0) -> None:
        tasks = self.env.get("SLURM_NTASKS", "1")
        if tasks.isdigit() and int(tasks) > 1:
            # a batch script that forgot `srun`: SLURM reserved N tasks, only one runs
            log.warning("single: this SLURM job asked for %s tasks but only this process runs; "
                        "start the script with `srun` to run one task per GPU", tasks)
        super().validate(gpus_per_node)

    def _check_gpus(self, gpus: int) -> None:
        """One process may drive several GPUs (nd/DataParallel): nothing to check."""
