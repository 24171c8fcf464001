"""The job's size and batch, resolved once from the flags and the launcher's environment.

``-b`` and ``-j`` mean per process, except on pytorch/examples' node-level launch (``--dist-url``
without a launcher), where they mean per node and each of the node's processes gets ``b // procs``
and ``ceil(j / procs)`` (main.py's arithmetic). Everything that needs the global batch, the batch of
one process or its loader workers reads the :class:`Batch` made here instead of recomputing it.
Nothing here imports torch: the processes a node-level launch spawns default to the GPUs the
NVIDIA driver lists (:func:`local_gpus`), and the launcher checks that torch sees the same number.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from hpc_imagenet.launch import environment, launchers

from hpc_imagenet.imagenet.config.errors import ConfigError

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver manages


@dataclass(frozen=True)
class Batch:
    """How many processes train, the batch each one steps on, the global batch (of one optimizer step:
    per_process x processes x accum_steps), loader workers."""
    processes: int = 1
    per_process: int = 256
    global_batch: int = 256
    workers: int = 4
    launcher: str = "single"  # hpc_imagenet.launch.environment's name, or "dist-url" for the node-level launch
    node_processes: int = 1  # processes the node-level launch spawns on this node (1 otherwise)
    accum_steps: int = 1  # micro-batches of per_process images each process adds up per optimizer step

    @property
    def per_process_step(self) -> int:
        """The images one process trains on per optimizer step (all its micro-batches)."""
        return self.per_process * self.accum_steps


def local_gpus(environ: Optional[Mapping[str, str]] = None) -> int:
    """GPUs this process may use, without importing torch: the driver's list, cut to the
    CUDA_VISIBLE_DEVICES entries before the first invalid one (CUDA stops enumerating there)."""
    environ = os.environ if environ is None else environ
    try:
        installed = len(list(NVIDIA_GPUS.iterdir()))
    except OSError:
        return 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return installed
    usable = 0
    for entry in visible.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        usable += 1
    return min(usable, installed)


def node_level(distributed: bool, dist_url: Optional[str], multiprocessing_distributed: bool,
               launcher: environment.ClusterEnvironment) -> bool:
    """pytorch/examples' launch: this script spawns the node's processes itself (no launcher ran it)."""
    return distributed and bool(dist_url or multiprocessing_distributed) and launcher.name == launchers.SINGLE


def resolve(batch_size: int, workers: int, *, distributed: bool, dist_url: Optional[str],
            multiprocessing_distributed: bool, nodes: int, procs_per_node: Optional[int],
            launcher: environment.ClusterEnvironment, accum_steps: int = 1, no_accel: bool = False) -> Batch:
    """The one Batch of this launch. Raises ConfigError when -b cannot be shared by the node's
    processes, or when a one-process variant was started as many. LAUNCHER: this process's, detected once.
    NO_ACCEL (--no-accel): a CPU run, one process per node on the node-level launch (main.py's)."""
    if node_level(distributed, dist_url, multiprocessing_distributed, launcher):
        procs = procs_per_node or (1 if no_accel else local_gpus(launcher.env) or 1)
        if batch_size < procs:
            raise ConfigError(f"-b {batch_size} is the batch per node on this launch (--dist-url), shared by its "
                             f"{procs} processes: use -b {procs} or more")
        per_process = batch_size // procs
        processes = max(nodes, 1) * procs
        return Batch(processes, per_process, per_process * processes * accum_steps, -(-workers // procs),
                     launchers.DIST_URL, procs, accum_steps)
    if not distributed and launcher.world_size > 1:
        raise ConfigError(f"this variant runs as one process, but {launcher.name} started {launcher.world_size}; "
                          "use imagenet/imagenet_ddp.py for multi-process training")
    processes = launcher.world_size if distributed else 1
    return Batch(processes, batch_size, batch_size * processes * accum_steps, workers, launcher.name,
                 accum_steps=accum_steps)
