"""Checks made on the login node before anything is submitted: the archives are there, whole and of
the published size, and the output folder has room for the shards.

A size check reads no image: the sizes against ILSVRC 2012's published ones, and each tar's last
kilobyte (a tar ends with two zero blocks, a download cut short does not).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import archives

from hpc_imagenet.slurm.jobchain.state import ChainError

# The published files' sizes in bytes (image-net.org, ILSVRC 2012)
OFFICIAL_BYTES = {archives.TRAIN_TAR: 147_897_477_120, archives.VAL_TAR: 6_744_924_160}
FULL_OUTPUT_BYTES = 150 * 10**9  # the shards of the full download: ~144 GB of original bytes, and the index
MARGIN = 1.02  # tar headers of the shards, the index, the checksums
TAR_END = 1024  # two 512-byte zero blocks


def check_archives(folder: Path, official: bool = True) -> archives.Archives:
    """The download in FOLDER; ChainError for a missing file, a tar cut short, a size not published."""
    try:
        found = archives.find(str(folder))
    except DataError as e:
        raise ChainError(str(e)) from None
    for path in (found.train, found.val):
        size = os.path.getsize(path)
        expected = OFFICIAL_BYTES[os.path.basename(path)]
        if official and size != expected:
            raise ChainError(f"{path} is {size:,} bytes, not the published {expected:,}: the download is incomplete "
                             f"or not ILSVRC 2012's; {archives.DOWNLOAD} again (or pass --any-archives for a "
                                "subset or archives of your own)")
        if size < TAR_END or _tail(path) != bytes(TAR_END):
            raise ChainError(f"{path} ends mid-file ({size:,} bytes): the download was cut short; "
                             f"{archives.DOWNLOAD} again")
    return found


def _tail(path: str) -> bytes:
    with open(path, "rb") as f:
        f.seek(-TAR_END, os.SEEK_END)
        return f.read()


def needed_bytes(found: archives.Archives, official: bool = True) -> int:
    """Room the shards need: ~150 GB for the full download, else the archives' size and a margin."""
    if official:
        return FULL_OUTPUT_BYTES
    return int(MARGIN * (os.path.getsize(found.train) + os.path.getsize(found.val))) + 2**20


def folder_bytes(folder: Path) -> int:
    """Bytes already in FOLDER (shards a resumed chain keeps)."""
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def check_space(out: Path, needed: int, data: Path) -> None:
    """ChainError when OUT's filesystem lacks room for what is still to be written."""
    existing = out
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    missing = needed - folder_bytes(data)
    if free < missing:
        raise ChainError(f"{existing} has {free / 1e9:.1f} GB free but the shards need {missing / 1e9:.1f} GB "
                         f"more; free space there or pass another output folder")
