"""Process-group set-up, its time bounds and the one-line messages for a group that fails.

:class:`hpc_imagenet.imagenet.process.group.DistInfo` is this process's place in the job (rank, device, backend),
and the collectives the engine uses live beside it, below the rooms that use them. It comes either from
the launcher's environment (torchrun, ``torch.distributed.launch``, SLURM, MPI: see
``hpc_imagenet.launch.environment``) or, for the node-level ``--dist-url`` style of pytorch/examples, from
the node rank and the index of the process spawned on that node.

Two time bounds: the group is formed with ``--dist-timeout`` (long: it also covers the staging copy
and the dataset scan, which the other ranks wait for); once set-up is over the training runs under
``--collective-timeout`` (minutes), so a rank that stops answering ends the job soon. The ranks that
are still alive then check in at the rendezvous store, which tells which ranks did not arrive.
"""
from __future__ import annotations

import datetime
import logging
import os
import re
import socket
import time
from typing import List, Optional

import torch
import torch.distributed as dist

from hpc_imagenet.launch import environment, launchers

from hpc_imagenet.imagenet.process import group
from hpc_imagenet.imagenet.process.group import DistInfo
from hpc_imagenet.imagenet.run import sysinfo

log = logging.getLogger(__name__)


class DistError(RuntimeError):
    """The process group cannot be formed; the message says what to check."""


def pick_device(local_rank: int, gpu: Optional[int] = None, no_accel: bool = False) -> torch.device:
    """This process's device: its GPU, or the CPU where there is none or with NO_ACCEL (--no-accel)."""
    if no_accel:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if local_rank == 0:  # once per node: GPUs this torch cannot use are worth one line
            sysinfo.warn_if_gpus_unusable()
        return torch.device("cpu")
    index = gpu if gpu is not None else local_rank
    if index >= torch.cuda.device_count():
        raise DistError(f"GPU {index} requested but this node has {torch.cuda.device_count()}; start at most "
                        f"{torch.cuda.device_count()} processes per node or fix --gpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def pick_backend(requested: Optional[str], device: torch.device) -> str:
    backend = requested or ("nccl" if device.type == "cuda" else "gloo")
    if backend == "nccl" and device.type != "cuda":
        raise DistError("--dist-backend nccl needs CUDA GPUs; on CPU use --dist-backend gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        raise DistError("this PyTorch build has no MPI backend (torch.distributed.is_mpi_available() is False); "
                        "use --dist-backend nccl (GPU) or gloo (CPU) — launching under mpirun still works")
    return backend


def from_environment(cfg, env: environment.ClusterEnvironment) -> DistInfo:
    """Layout from ENV, the launcher the settings' batch was resolved for (single process when there is none)."""
    local_rank, gpu_index = env.local_rank, env.device_index
    if cfg.dist.local_rank is not None and launchers.of(env).name == launchers.SINGLE:
        local_rank = gpu_index = cfg.dist.local_rank  # an old torch.distributed.launch that passes only --local_rank
    env.validate(0 if cfg.dist.no_accel else torch.cuda.device_count())
    # SLURM's --gpus-per-task=1 leaves each task one visible GPU: its index is 0, not the local rank.
    device = pick_device(gpu_index, cfg.dist.gpu if not cfg.distributed else None, cfg.dist.no_accel)
    multi = cfg.distributed and env.world_size > 1
    backend = pick_backend(cfg.dist.dist_backend, device) if multi else None
    init = launchers.init_method(env)  # torchrun's workers join the agent's store; the others, rank 0's address
    return DistInfo(env.rank, local_rank, env.world_size, env.local_world_size, env.node_rank, env.name,
                    device, backend, init if multi else None)


def for_spawned(dist, local_index: int, procs_per_node: int) -> DistInfo:
    """Layout of process LOCAL_INDEX spawned on node --rank by the --dist-url launch (DIST: the
    settings' dist section)."""
    device = pick_device(local_index, no_accel=dist.no_accel)
    return DistInfo(rank=dist.rank * procs_per_node + local_index, local_rank=local_index,
                    world_size=dist.world_size * procs_per_node, local_world_size=procs_per_node,
                    node_rank=dist.rank, environment=launchers.DIST_URL, device=device,
                    backend=pick_backend(dist.dist_backend, device), init_method=dist.dist_url)


def init(info: DistInfo, timeout_s: float, collective_s: Optional[float] = None) -> None:
    """Form the group: the rendezvous under TIMEOUT_S; the collectives under it too, until set-up is over
    (set_collective_timeout), except where the backend cannot be shortened later (see _formed_timeout)."""
    if not info.distributed:
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    formed = _formed_timeout(info, timeout_s, collective_s)
    try:
        store = _attempt_store(info, timeout)
        if store is None and formed != timeout:  # the rendezvous keeps the long bound; the collectives get the short
            store, _, _ = next(dist.rendezvous(info.init_method, rank=info.rank, world_size=info.world_size,
                                               timeout=timeout))
        where = {"store": store} if store is not None else {"init_method": info.init_method}
        dist.init_process_group(info.backend, rank=info.rank, world_size=info.world_size, timeout=formed, **where)
    except (RuntimeError, ValueError, OSError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistError(f"rank {info.rank} could not join the process group at {info.init_method} within "
                        f"{timeout_s:.0f}s ({reason}); check that all {info.world_size} processes were started "
                        "with the same master address/port and that it is reachable from this node") from None
    if info.device.type == "cuda":
        dist.barrier(device_ids=[info.device.index])
    else:
        dist.barrier()
    group.gather_hosts()


def _formed_timeout(info: DistInfo, timeout_s: float, collective_s: Optional[float]) -> datetime.timedelta:
    """The timeout the group is formed with: TIMEOUT_S, shortened to COLLECTIVE_S once set-up is over. gloo
    before torch's public dist.set_timeout (torch 2.6 among them) keeps the timeout its connections were made
    with (torch's private setter changes only new ones), so there the group is formed with COLLECTIVE_S, said
    once: set-up (staging, the scan) must then finish within it."""
    if collective_s is None or collective_s >= timeout_s or info.backend != "gloo" or hasattr(dist, "set_timeout"):
        return datetime.timedelta(seconds=timeout_s)
    if info.rank == 0:
        log.warning("torch %s: gloo cannot shorten its timeout once formed (torch 2.10 and later can), so the "
                    "group runs under --collective-timeout %gs from the start, set-up included (raise it for a "
                    "long staging copy)", torch.__version__, collective_s)
    return datetime.timedelta(seconds=collective_s)


def _attempt_store(info: DistInfo, timeout: datetime.timedelta) -> Optional["dist.Store"]:
    """Under torchrun, the rendezvous store seen through a prefix of its own for this restart.

    torchrun (torch >= 2.4) keeps one store for every restart of its workers; the group's keys
    (the peers' addresses among them) of the attempt before are still there, and a restarted worker
    reads them and fails to connect to processes that no longer exist. None: not under torchrun."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or info.init_method != "env://":
        return None
    store, _, _ = next(dist.rendezvous("env://", rank=info.rank, world_size=info.world_size, timeout=timeout))
    return dist.PrefixStore(f"hpc_imagenet/attempt_{attempt}", store)


_PEER_ADDRESS = re.compile(r"\[?(\d{1,3}(?:\.\d{1,3}){3})\]?:\d+")
# Words of the backends' errors for a peer that died or stopped answering. gloo raises "Application
# timeout caused pair closure" from DDP's backward when its own timeout closes the connection before
# the wait does (seen on the test cluster with a node's link down); it names no backend.
_COMM_FAILURE = ("gloo", "nccl", "connection closed", "connection reset", "timed out waiting", "broken pipe",
                 "pair closure")


def _is_comm_failure(exc: BaseException) -> bool:
    """Whether EXC is a collective's failure (a peer died, went silent or became unreachable), as far
    as a message can tell; names nothing, so it costs no host lookup."""
    text = " ".join(str(exc).split()).lower()
    return isinstance(exc, getattr(dist, "DistError", ())) or (
        isinstance(exc, RuntimeError) and any(word in text for word in _COMM_FAILURE))


def lost_peer_message(exc: BaseException, rank: int) -> Optional[str]:
    """One line for a collective that failed because a peer died or became unreachable (None: not that).

    The backend's own message is long and names an address at best (gloo: "Connection closed by peer
    [10.0.0.12]:4242"), at worst nothing ("Timed out waiting 30000ms for recv operation"); this names
    the peer's host when the message holds its address, else the hosts of the other ranks.
    """
    known = group.gathered_hosts()
    if not _is_comm_failure(exc) or not known:
        return None
    text = " ".join(str(exc).split())
    me = known[rank] if rank < len(known) else socket.gethostname()
    found = _PEER_ADDRESS.search(text)
    if found:
        peer = _host_of(found.group(1))
    else:
        others = sorted({h for h in known if h != me}) or ["another process on this node"]
        peer = ", ".join(others[:8]) + (f" (+{len(others) - 8} more)" if len(others) > 8 else "")
    reason = _short_reason(text)
    return (f"rank {rank} on {me} lost contact with {peer} during a collective ({reason}); check that "
            "node's processes and network, then restart with --resume auto")


def set_collective_timeout(seconds: float) -> None:
    """From now on a collective of the default group fails after SECONDS without progress."""
    if not group.initialized():
        return
    timeout = datetime.timedelta(seconds=seconds)
    setter = getattr(dist, "set_timeout", None)  # torch >= 2.10; the private one since 2.3
    (setter or dist.distributed_c10d._set_pg_timeout)(timeout)


def missing_ranks(rank: int, grace_s: float) -> Optional[List[int]]:
    """After a failed collective: check in at the rendezvous store and wait up to GRACE_S for every
    other rank to do the same; the ranks that did not (None: the store itself did not answer, e.g.
    when the stopped process is the one that hosts it)."""
    world = dist.get_world_size()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # torchrun's store outlives a restart
    keys = [f"hpc_imagenet/arrived/{attempt}/{r}" for r in range(world)]
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(datetime.timedelta(seconds=grace_s))
        store.set(keys[rank], b"1")
        deadline = time.monotonic() + grace_s
        # polled, not store.wait(): that one logs two warnings of its own when it times out
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [r for r in range(world) if not store.check([keys[r]])]
    except (RuntimeError, AttributeError, ValueError):
        return None


def hang_message(exc: BaseException, rank: int, timeout_s: float) -> Optional[str]:
    """One line naming the ranks that did not arrive in a collective that timed out. None: EXC is
    not a collective's timeout, or the store cannot tell; "": another rank (the lowest that arrived)
    prints the line."""
    text = " ".join(str(exc).split()).lower()
    known = group.gathered_hosts()
    if "timed out" not in text and "timeout" not in text or not _is_comm_failure(exc) or not known:
        return None
    missing = missing_ranks(rank, grace_s=min(60.0, max(5.0, timeout_s / 4)))
    if not missing:
        return None
    if rank != min(r for r in range(len(known)) if r not in missing):
        return ""
    named = ", ".join(f"{r} ({known[r]})" for r in missing[:16]) + (
        f" (+{len(missing) - 16} more)" if len(missing) > 16 else "")
    return (f"a training collective made no progress for {timeout_s:.0f}s (--collective-timeout): rank(s) "
            f"{named} did not arrive (stopped, hung or unreachable); check those processes, then restart "
            "with --resume auto")


def _host_of(address: str) -> str:
    try:
        return f"{socket.gethostbyaddr(address)[0]} ({address})"
    except OSError:
        return address


def _short_reason(text: str) -> str:
    text = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", text)  # gloo's [file.cc:123] prefixes
    return text[:160] + ("..." if len(text) > 160 else "")


