"""This process's place in the job and the collectives the training loop and the data path use.

:class:`DistInfo` (rank, device, backend) and the few collectives every room needs (a sum, a
flag from any rank, a broadcast, gathers, a barrier), each a no-op without a process group, so
single-process runs take the same code. The group itself is formed in :mod:`hpc_imagenet.imagenet.run.distributed`
(the launcher's environment, the time bounds, the failure messages); it lives below train/ and data/
so that they need nothing from the room that assembles a run.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, List, Optional

import torch
import torch.distributed as dist

_hosts: List[str] = []  # rank -> host name, gathered once when the group is formed


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    environment: str
    device: torch.device
    backend: Optional[str] = None     # None: no process group (one process)
    init_method: Optional[str] = None

    @property
    def is_primary(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(self.local_world_size, 1))


def initialized() -> bool:
    """True when a process group exists (False in a single-process run)."""
    return dist.is_available() and dist.is_initialized()


def cleanup() -> bool:
    """Destroy the process group; False where it is left to the process's exit instead: gloo before torch
    2.10 (seen with 2.6) can hang for good in the destructor, which joins a worker thread that waits for the
    interpreter lock the destructor holds (to free the last collective's tensor)."""
    if not initialized():
        return True
    if dist.get_backend() == "gloo" and _torch_before(2, 10):
        return False
    dist.destroy_process_group()
    return True


def _torch_before(major: int, minor: int) -> bool:
    return tuple(int(part) for part in torch.__version__.split(".")[:2]) < (major, minor)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when FLAG is true on any (one small collective)."""
    if not initialized():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_object(obj: Any) -> Any:
    """Rank 0's value of OBJ on every rank."""
    if not initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_object(obj: Any) -> list:
    """OBJ from every rank, in rank order; also a barrier that carries a value (an error, say)."""
    if not initialized():
        return [obj]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def all_gather_float(value: float, device: torch.device) -> list:
    """VALUE from every rank, in rank order."""
    return [row[0] for row in all_gather_floats([value], device)]


def all_gather_floats(values: List[float], device: torch.device) -> List[List[float]]:
    """VALUES (the same count on every rank) from every rank, in rank order: one small collective."""
    if not initialized():
        return [list(values)]
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return [t.tolist() for t in torch.stack(out).cpu()]


def barrier(device: torch.device) -> None:
    if initialized():
        dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


def gather_hosts() -> None:
    """Every rank's host name, gathered once right after the group forms: to name a lost peer later
    without asking it."""
    global _hosts
    _hosts = all_gather_object(socket.gethostname())


def gathered_hosts() -> List[str]:
    """The host names gathered at init, in rank order (empty before, or without a group)."""
    return list(_hosts)


def hosts() -> List[str]:
    """Every rank's host name, in rank order (gathered once at init; this host alone without a group)."""
    return list(_hosts) if _hosts else [socket.gethostname()]
