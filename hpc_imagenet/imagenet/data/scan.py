"""Step 1 of the data flow: check a dataset folder and index its samples (:mod:`.sources`).

ROOT is an ImageFolder (train/ and val/ of class folders) or a shard folder written by
``python -m hpc_imagenet.imagenet.data.shards``. Bad data is reported as :class:`DataError` with one line naming the
folder and the fix.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from hpc_imagenet.imagenet.common.errors import DataError, one_line
from hpc_imagenet.imagenet.data import sources

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _classes(split_dir: Path) -> List[str]:
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))


def _scan(split_dir: Path, classes: Sequence[str]) -> sources.FolderIndex:
    samples = []
    for index, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(split_dir / name, followlinks=True)):
            samples.extend((os.path.join(dirpath, f), index) for f in sorted(files)
                           if f.lower().endswith(IMAGE_EXTENSIONS))
    return sources.FolderIndex.from_samples(samples)  # the list of tuples is dropped here


Index = Dict[str, "sources.FolderIndex | sources.ShardIndex"]


def scan_dataset(root: str) -> Tuple[List[str], Index]:
    """Check ROOT and index its train and val samples; raise DataError on anything unusable.

    ROOT is an ImageFolder (train/ and val/ of class folders) or a shard folder written by
    ``python -m hpc_imagenet.imagenet.data.shards`` (recognised by its index file).
    """
    base = Path(root)
    if not base.is_dir():
        raise DataError(f"dataset directory {root} does not exist; pass the folder holding train/ and val/ "
                        "(or use --dummy)")
    if sources.is_shard_folder(root):
        return sources.load_index(root)
    split_classes = {}
    for split in ("train", "val"):
        d = base / split
        if not d.is_dir():
            raise DataError(f"{d} is missing: the dataset root needs train/ and val/ ImageFolders "
                            "(class sub-folders of images); python -m hpc_imagenet.imagenet.data.prepare ARCHIVES DST "
                            "writes them "
                            "from ImageNet's download")
        if not os.access(d, os.R_OK | os.X_OK):
            raise DataError(f"{d} is not readable by this user; fix its permissions")
        split_classes[split] = _classes(d)
        if not split_classes[split]:
            raise DataError(f"{d} has no class folders: put each class's images in {d}/<class_name>/")
    train_c, val_c = split_classes["train"], split_classes["val"]
    if train_c != val_c:
        only_train = sorted(set(train_c) - set(val_c))[:3]
        only_val = sorted(set(val_c) - set(train_c))[:3]
        raise DataError(f"train/ and val/ have different class folders (only in train: {only_train}, only in "
                        f"val: {only_val}); both splits need the same classes")
    samples = {}
    for split in ("train", "val"):
        samples[split] = _scan(base / split, train_c)
        if not len(samples[split]):
            raise DataError(f"{base / split} has class folders but no images ({', '.join(IMAGE_EXTENSIONS)})")
    return train_c, samples


def scan_dataset_once(root: str, rank: int) -> Tuple[List[str], Index]:
    """scan_dataset on global rank 0 only; every rank gets rank 0's result, or raises rank 0's error.

    Each rank walking the tree is N metadata scans of ~1.3M files on a shared filesystem (Lustre,
    GPFS) at start-up; one is enough. The index is numpy arrays, so the broadcast pickles a few
    buffers, not millions of tuples. A failed scan is broadcast instead of the result, so every rank
    stops with the same DataError line rather than waiting on a broadcast that never comes. With
    nccl the pickled lists travel through the current CUDA device, set by
    hpc_imagenet.imagenet.run.distributed.pick_device.
    """
    # imported here: only this function needs torch; the shard writer and prepare command lines import
    # this module for scan_dataset and start 1.4 CPU seconds sooner without it
    from hpc_imagenet.imagenet.process import group

    if not group.initialized():
        return scan_dataset(root)
    outcome, failure = None, None
    if rank == 0:
        try:
            outcome = scan_dataset(root)
        except Exception as e:  # the other ranks are waiting in the broadcast below: send them the failure
            failure = e
            outcome = (DataError(str(e)) if isinstance(e, DataError)
                       else RuntimeError(f"rank 0 could not scan {root}: {type(e).__name__}: {one_line(e)}"))
    root0, outcome = group.broadcast_object((root, outcome))
    if failure is not None:
        raise failure
    if isinstance(outcome, Exception):
        raise outcome
    return _rebased(outcome, root0, root)


def _rebased(scan, old_root: str, new_root: str):
    """Rank 0's index reading under this rank's ROOT: with --stage-dir each node reads its own copy,
    whose path may differ from rank 0's ('/local/$SLURMD_NODENAME')."""
    old, new = str(Path(old_root)), str(Path(new_root))
    if old == new:
        return scan
    classes, splits = scan
    return classes, {split: _moved(index, old, new) for split, index in splits.items()}


def _moved(index, old: str, new: str):
    moved = copy.copy(index)
    attr = "prefix" if index.kind == "folder" else "root"  # FolderIndex's common folder, ShardIndex's folder
    setattr(moved, attr, new + getattr(index, attr)[len(old):])
    return moved
