"""Checkpoints written off the training path: a host copy at the boundary, the write in a thread.

At a checkpoint boundary the training thread waits for the previous write (at most one is in
flight, so the extra host memory is bounded: one copy of the state, kept for the next snapshot to
copy into, plus its serialised bytes while they are written), copies the state to host memory and
goes on training; a thread serialises the copy and writes it atomically
(:func:`hpc_imagenet.imagenet.train.checkpoint.save`). The copy must be a real one, made before the next optimizer
step: on the CPU ``tensor.to("cpu")`` returns the same tensor, and a write that serialised it
later would record a state the optimizer had moved on from (the pitfall of pytorch #144657), so
:func:`to_host` always clones.

Why not ``torch.distributed.checkpoint.async_save``: it writes a folder of per-rank shards in its
own format, with collectives on every rank at every save to plan them. Data-parallel replicas hold
the same state, so one rank writing one file is enough, and that file is what the rest of the
project and pytorch/examples users load (``torch.load(..., weights_only=True)``, ``--resume PATH``).
What async_save adds beyond that is the thread, which is the few lines here.

An error in the write (a full disk) is raised in the training thread at the next print boundary
(:meth:`BackgroundWriter.check`), checkpoint or :meth:`BackgroundWriter.wait`, as the one-line
:class:`hpc_imagenet.imagenet.train.checkpoint.CheckpointError`.
"""
from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

import torch

from hpc_imagenet.imagenet.train import checkpoint


def to_host(obj: Any, reuse: Any = None) -> Any:
    """A copy of OBJ (nested dicts, lists, tuples) whose tensors are CPU tensors of their own.

    REUSE, an earlier copy of the same structure that nothing reads any more, lends its tensors
    where shape, dtype and layout match: copying into memory already touched costs no page faults,
    which make a fresh copy several times slower."""
    if isinstance(obj, torch.Tensor):
        obj = obj.detach()
        if (isinstance(reuse, torch.Tensor) and reuse.shape == obj.shape and reuse.dtype == obj.dtype
                and reuse.stride() == obj.stride() and reuse.device.type == "cpu"):
            return reuse.copy_(obj)
        return obj.to("cpu", copy=True)
    if isinstance(obj, dict):
        old = reuse if isinstance(reuse, dict) else {}
        out = type(obj)() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = to_host(v, old.get(k))
        if hasattr(obj, "_metadata"):  # a module state_dict's per-module versions, read by load_state_dict
            out._metadata = copy.deepcopy(obj._metadata)
        return out
    if isinstance(obj, (list, tuple)):
        old = reuse if isinstance(reuse, (list, tuple)) and len(reuse) == len(obj) else [None] * len(obj)
        items = [to_host(v, r) for v, r in zip(obj, old)]
        return items if isinstance(obj, list) else tuple(items)
    return copy.deepcopy(obj)


class SaveStats:
    """What checkpointing cost: the training thread's stall per save, the write time, the bytes."""

    def __init__(self) -> None:
        self.stall_s: list = []
        self.write_s: list = []
        self.bytes = 0

    def as_dict(self) -> dict:
        n = len(self.stall_s)
        return {"saves": n, "stall_ms_mean": 1000 * sum(self.stall_s) / n if n else None,
                "stall_ms_max": 1000 * max(self.stall_s) if n else None,
                "write_s_mean": sum(self.write_s) / len(self.write_s) if self.write_s else None,
                "bytes_written": self.bytes}


class BackgroundWriter:
    """Checkpoints of one run folder, written one at a time in a background thread."""

    def __init__(self, run_dir, keep: int):
        self.run_dir, self.keep = run_dir, keep
        self.stats = SaveStats()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._last: Optional[dict] = None  # the previous snapshot, written: its memory is reused

    def save(self, state: Callable[[], dict], is_best: bool = False) -> None:
        """Snapshot STATE() to host memory now, write it in the background."""
        start = time.perf_counter()
        self.wait()
        snapshot = self._last = to_host(state(), self._last)
        self.stats.stall_s.append(time.perf_counter() - start)
        # not a daemon: an interpreter that is exiting (an error elsewhere) still finishes the write
        self._thread = threading.Thread(target=self._write, args=(snapshot, is_best), name="checkpoint-writer")
        self._thread.start()

    def save_now(self, state: Callable[[], dict], is_best: bool = False) -> None:
        """Write STATE() before returning (a stop signal: the process exits next)."""
        start = time.perf_counter()
        self.wait()
        self._write(state(), is_best)
        self.stats.stall_s.append(time.perf_counter() - start)
        self._raise()

    def check(self) -> None:
        """Raise the error of a write that has ended, without waiting for one in flight."""
        if self._thread is not None and not self._thread.is_alive():
            self.wait()

    def wait(self) -> None:
        """Until the write in flight, if any, is on disk; raises its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise()

    def _write(self, state: dict, is_best: bool) -> None:
        start = time.perf_counter()
        try:
            self.stats.bytes += checkpoint.save(state, self.run_dir, is_best, self.keep)
        except BaseException as e:  # handed to the training thread
            self._error = e
            return
        self.stats.write_s.append(time.perf_counter() - start)

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class NullWriter(BackgroundWriter):
    """The writer of a rank that writes no checkpoint (every rank but 0): the loop calls it as rank 0's."""

    def save(self, state: Callable[[], dict], is_best: bool = False) -> None:
        """Nothing: rank 0 writes the checkpoint."""

    def save_now(self, state: Callable[[], dict], is_best: bool = False) -> None:
        """Nothing: rank 0 writes the checkpoint."""


def for_rank(primary: bool, run_dir, keep: int) -> BackgroundWriter:
    """Rank 0 (PRIMARY) writes the run's checkpoints; the others get a writer that does nothing."""
    return BackgroundWriter(run_dir, keep) if primary else NullWriter(run_dir, keep)
