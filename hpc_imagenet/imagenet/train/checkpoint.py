"""Atomic, requeue-safe checkpoints in the run folder.

A checkpoint is written to a temporary file in the same folder, flushed to disk, then renamed over
the old one, so a crash at any moment leaves either the previous good checkpoint or the new one,
never a torn file. Only rank 0 writes; every rank reads the same file (shared filesystem).
Checkpoints hold only tensors and plain Python values so they load with ``weights_only=True``.

Every checkpoint, whatever made it (an epoch end, a stop signal, a periodic one), replaces
``checkpoint.pth.tar``, so that file is always the newest complete one. The last K are also kept
under their position, ``checkpoint-eEPOCH-SAMPLE.pth.tar`` (a hard link to the same bytes, so
keeping them writes nothing more); ``--resume auto`` falls back to them, newest first, when the
newest cannot be read.
"""
from __future__ import annotations

import io
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from hpc_imagenet.imagenet.common import files

CHECKPOINT = "checkpoint.pth.tar"
BEST = "model_best.pth.tar"
KEPT_GLOB = "checkpoint-e*-*.pth.tar"

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be found or read; the message says which file and what to do."""


def _write_serialized(path: Path, state: dict) -> int:
    """Serialize STATE into PATH atomically; returns the bytes written. The serialized copy lives
    only in this frame, so its memory is freed before the kept/best copies are made."""
    data = _serialized(state)
    files.atomic_write(path, lambda f: f.write(data))
    return len(data)


def save(state: dict, run_dir: Path, is_best: bool = False, keep: int = 0) -> int:
    """Write the checkpoint (and the best copy; with KEEP, a kept copy under its position, pruning
    older ones to KEEP); returns the bytes written. A full disk or another OS error leaves the
    previous files as they were and raises a one-line CheckpointError."""
    path = Path(run_dir) / CHECKPOINT
    target = path
    try:
        _remove_stale_temps(Path(run_dir))
        written = _write_serialized(path, state)
        if keep:
            _keep(path, kept_name(state), keep)
        if is_best:
            target = Path(run_dir) / BEST
            files.atomic_write(target, lambda f: shutil.copyfileobj(open(path, "rb"), f))
            written *= 2
    except OSError as e:
        kept = "the previous one is kept" if target.exists() else "nothing was kept"
        raise CheckpointError(f"cannot write checkpoint {target} ({_reason(e)}); {kept}: free space in "
                              f"{run_dir} or pass another --log-dir, then restart with --resume auto") from None
    return written


def _remove_stale_temps(run_dir: Path) -> None:
    """Temp files a killed writer left (one save at a time: none of them is being written now). Only
    the checkpoints' own: run.json may be being written by the training thread."""
    for name in (CHECKPOINT, BEST):
        for stale in run_dir.glob(f".{name}.*{files.TEMP_SUFFIX}"):
            stale.unlink(missing_ok=True)


def kept_name(state: dict) -> str:
    """checkpoint-eEPOCH-SAMPLE.pth.tar: the position as a sample count within the epoch, which does
    not depend on the world size, so names sort in training order across requeues on other node counts."""
    return f"checkpoint-e{int(state['epoch']):04d}-{sample_position(state):011d}.pth.tar"


def sample_position(state: dict) -> int:
    """The samples of STATE's epoch trained before its position: its step times the global batch it
    was taken with. The sampler's order is the same for any world size, so this is where a run resumed
    with another global batch goes on."""
    return int(state.get("step_in_epoch", 0)) * int(state.get("global_batch", 1))


def _keep(newest: Path, name: str, keep: int) -> None:
    """Link NEWEST as NAME (atomically: a temp link renamed), then delete all but the last KEEP."""
    folder = newest.parent
    tmp = folder / f".{name}.link.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(newest, tmp)
    except OSError:  # a filesystem without hard links: copy instead
        files.atomic_write(folder / name, lambda f: shutil.copyfileobj(open(newest, "rb"), f))
    else:
        os.replace(tmp, folder / name)
        files.fsync_dir(folder)
    for old in kept(folder)[:-keep]:
        old.unlink(missing_ok=True)


def kept(run_dir: Path) -> list:
    """The kept checkpoints in RUN_DIR, oldest first."""
    return sorted(Path(run_dir).glob(KEPT_GLOB))


def remove_all(run_dir: Path) -> None:
    """Every checkpoint file in RUN_DIR: the newest, the best, the kept ones and a killed writer's
    temp files (run.json and the TensorBoard events stay). For a caller done with a finished run."""
    run_dir = Path(run_dir)
    _remove_stale_temps(run_dir)
    for path in [run_dir / CHECKPOINT, run_dir / BEST, *kept(run_dir)]:
        path.unlink(missing_ok=True)


def _serialized(state: dict) -> memoryview:
    # In memory first: torch.save writing into a file reports a full disk as "unexpected pos ...";
    # a plain write raises OSError with its errno (ENOSPC, EDQUOT, EIO), which the message can name.
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer()


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


def load(path, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; check --resume (or use --resume auto)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated, foreign or corrupt file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"cannot read checkpoint {path} ({first[:200]}); it is not a checkpoint of this "
                              "tool or is damaged: pass another --resume file") from None


def resume_path(resume: str, run_dir: Path) -> Optional[Path]:
    """The file --resume points at; for 'auto', the run folder's checkpoint if there is one."""
    if not resume:
        return None
    if resume == "auto":
        candidate = Path(run_dir) / CHECKPOINT
        return candidate if candidate.is_file() else None
    return Path(resume)


def load_for_resume(resume: str, run_dir: Path) -> tuple:
    """(path, checkpoint) for --resume, or (None, None) when there is nothing to resume from.

    For 'auto': the newest checkpoint that reads, newest first: checkpoint.pth.tar, then the kept
    ones (a damaged newest file, e.g. on a filesystem whose rename is not atomic, costs one interval)."""
    path = resume_path(resume, run_dir)
    if resume != "auto":
        return (path, load(path)) if path else (None, None)
    candidates = ([path] if path else []) + [p for p in reversed(kept(run_dir))]
    for i, candidate in enumerate(candidates):
        try:
            return candidate, load(candidate)
        except CheckpointError as e:
            if i == len(candidates) - 1:
                raise
            log.warning("%s; trying the next older checkpoint", e)
    return None, None


# ---------------------------------------------------------------- random state

def rng_state() -> dict:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
