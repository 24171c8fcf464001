"""Atomic, requeue-safe checkpoints in the run folder.

A checkpoint is written to a temporary file in the same folder, flushed to disk, then renamed over
the old one, so a crash at any moment leaves either the previous good checkpoint or the new one,
never a torn file. Only rank 0 writes; every rank reads the same file (shared filesystem).
Checkpoints hold only tensors and plain Python values so they load with ``weights_only=True``.
"""
from __future__ import annotations

import io
import random
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from . import files

CHECKPOINT = "checkpoint.pth.tar"
BEST = "model_best.pth.tar"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be found or read; the message says which file and what to do."""


def save(state: dict, run_dir: Path, is_best: bool = False) -> Path:
    """Write the checkpoint (and the best copy); a full disk or another OS error leaves the previous
    files as they were and raises a one-line CheckpointError."""
    path = Path(run_dir) / CHECKPOINT
    target = path
    try:
        files.atomic_write(path, lambda f: f.write(_serialized(state)))
        if is_best:
            target = Path(run_dir) / BEST
            files.atomic_write(target, lambda f: shutil.copyfileobj(open(path, "rb"), f))
    except OSError as e:
        kept = "the previous one is kept" if target.exists() else "nothing was kept"
        raise CheckpointError(f"cannot write checkpoint {target} ({_reason(e)}); {kept}: free space in "
                              f"{run_dir} or pass another --log-dir, then restart with --resume auto") from None
    return path


def _serialized(state: dict) -> memoryview:
    # In memory first: torch.save writing into a file reports a full disk as "unexpected pos ...";
    # a plain write raises OSError with its errno (ENOSPC, EDQUOT, EIO), which the message can name.
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer()


def _reason(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


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
