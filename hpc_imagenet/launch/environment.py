"""Where this process sits in the job: :func:`detect` picks the cluster environment whose variables are present.

The engine calls :func:`detect`, then ``env.validate(torch.cuda.device_count())``, then reads
``rank``, ``local_rank``, ``world_size``, ``local_world_size``, ``node_rank``, ``master_addr``,
``master_port`` and ``device_index``; it never cares which launcher started it.

Detection order is the launcher table's (:mod:`hpc_imagenet.launch.launchers`), a single process last:

1. ``hpc_imagenet.launch.mpi`` (``mpirun ... python -m hpc_imagenet.launch.mpi``): it exports torch's variables plus a
marker.
2. torchrun / ``torch.distributed.launch`` (RANK, WORLD_SIZE, ...): checked before SLURM and MPI
   because it also runs inside SLURM and MPI allocations, where their variables are inherited.
3. A SLURM task started by ``srun`` (not the batch shell itself).
4. Open MPI (``OMPI_COMM_WORLD_*``), 5. MPICH / Intel MPI / hydra (``PMI_*``), 6. PMIx.
7. Kubeflow's PyTorchJob: one process per pod, given MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK and
   no LOCAL_RANK (a pod that runs torchrun gets LOCAL_RANK from it and is case 2).
8. A single process.

Each environment class (one module per launcher family in :mod:`hpc_imagenet.launch.envs`) keeps the variable
names it reads in one table (``VARS``: role -> candidate names, first present wins), so supporting a
new launcher version means editing one table. This module also gathers the package's public names,
so ``environment.LaunchError`` and ``environment.SlurmEnvironment`` stay where the engine and users
import them.
"""
from __future__ import annotations

import logging
import os
from typing import Mapping, Optional

from hpc_imagenet.launch import launchers
from hpc_imagenet.launch.envs.base import ClusterEnvironment
from hpc_imagenet.launch.envs.mpi import MPICHEnvironment, OpenMPIEnvironment, PMIxEnvironment
from hpc_imagenet.launch.envs.pytorchjob import PyTorchJobEnvironment
from hpc_imagenet.launch.envs.single import SingleProcessEnvironment
from hpc_imagenet.launch.envs.slurm import SlurmEnvironment
from hpc_imagenet.launch.envs.torchrun import MPI_MARKER, MpiLaunchEnvironment, TorchElasticEnvironment
from hpc_imagenet.launch.errors import LaunchError
from hpc_imagenet.launch.hostlist import expand_hostlist, expand_tasks_per_node
from hpc_imagenet.launch.ports import DEFAULT_PORT, LOOPBACK, PORT_BASE, PORT_SPAN, derive_port, free_port

__all__ = ["ClusterEnvironment", "DEFAULT_PORT", "LOOPBACK", "LaunchError", "MPICHEnvironment", "MPI_MARKER",
           "MpiLaunchEnvironment", "OpenMPIEnvironment", "PMIxEnvironment", "PORT_BASE", "PORT_SPAN",
           "PyTorchJobEnvironment", "SingleProcessEnvironment", "SlurmEnvironment", "TorchElasticEnvironment",
           "derive_port", "detect", "expand_hostlist", "expand_tasks_per_node", "free_port"]

log = logging.getLogger(__name__)


def detect(environ: Optional[Mapping[str, str]] = None) -> ClusterEnvironment:
    """The first environment whose variables are present (hpc_imagenet.launch.mpi/torchrun first, single last)."""
    env = os.environ if environ is None else environ
    for cls in launchers.detection_order():
        if cls.detect(env):
            found = cls(env)
            break
    else:
        found = SingleProcessEnvironment(env)
    log.debug("detected %s", found.describe())
    return found
