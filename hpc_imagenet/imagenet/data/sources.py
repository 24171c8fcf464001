"""Dataset sources: where a sample's bytes live, kept in compact numpy indexes.

A source maps a global sample index to (encoded image bytes, class id, a name for messages). Two
kinds exist, with one interface (``len``, ``read(i)``, ``target(i)``, ``name(i)``):

:class:`FolderIndex`
    An ImageFolder: one file per image, opened and read per sample.
:class:`ShardIndex`
    Tar shards written by ``python -m hpc_imagenet.imagenet.data.shards``: each sample is a byte range of a shard.
    A loader worker opens each shard once and reads samples with ``os.pread`` (no open() per image,
    no shared file position between threads).

Why numpy and not lists of (path, class): a Python list of 1.28M tuples is ~226 MB per rank, and
every DataLoader worker that reads the entries touches their reference counts, so copy-on-write
gives each worker a private copy of the pages (a known PyTorch problem). Here the paths are one
bytes buffer plus int64 offsets and the classes one int32 array: a few reference-counted objects
whose pages forked workers share untouched (``python -m hpc_imagenet.harness.bench shards`` measures both). The
arrays pickle as plain buffers, so rank 0's scan broadcasts them cheaply
(:func:`hpc_imagenet.imagenet.data.scan.scan_dataset_once`).

The shard index file (:data:`INDEX_NAME`) is a numpy ``.npz`` without pickles: a JSON header
(format, classes, shard file names and sizes) and per split the int arrays shard / offset / size /
target. Its ``offset`` and ``size`` are the byte range of each sample's image payload in its tar.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.errors import DataError

INDEX_NAME = "shards-index.npz"
FORMAT = "hpc-imagenet-shards/1"
SPLITS = ("train", "val")


def pack_strings(strings: Iterable[str]) -> Tuple[np.ndarray, np.ndarray]:
    """Strings -> (one uint8 buffer of their UTF-8 bytes, int64 offsets with a leading 0)."""
    encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets


def class_ids(targets: Sequence[int]) -> np.ndarray:
    return np.asarray(targets, dtype=np.int32)


class _Samples:
    """Iteration as (name, class) pairs, like the lists of (path, class) these indexes replace."""

    def __iter__(self) -> Iterator[Tuple[str, int]]:
        return ((self.name(i), self.target(i)) for i in range(len(self)))


class FolderIndex(_Samples):
    """An ImageFolder split: packed paths (after their common prefix, e.g. ``/data/imagenet/train/``)
    and class ids."""

    kind = "folder"

    def __init__(self, prefix: str, paths: np.ndarray, offsets: np.ndarray, targets: np.ndarray):
        self.prefix, self.paths, self.offsets, self.targets = prefix, paths, offsets, targets
        self.opens = 0  # files this process opened through read(): the I/O benchmark counts them

    @classmethod
    def from_samples(cls, samples: Sequence[Tuple[str, int]]) -> "FolderIndex":
        prefix = os.path.commonprefix([p for p, _ in samples])  # of the smallest and largest: of all
        prefix = prefix[:prefix.rfind("/") + 1]  # a whole folder
        paths, offsets = pack_strings(p[len(prefix):] for p, _ in samples)
        return cls(prefix, paths, offsets, class_ids([t for _, t in samples]))

    def __len__(self) -> int:
        return len(self.targets)

    def name(self, index: int) -> str:
        start, end = self.offsets[index], self.offsets[index + 1]
        return self.prefix + self.paths[start:end].tobytes().decode("utf-8", "surrogateescape")

    def target(self, index: int) -> int:
        return int(self.targets[index])

    def read(self, index: int) -> bytes:
        self.opens += 1
        with open(self.name(index), "rb") as f:
            return f.read()


class ShardIndex(_Samples):
    """A split of a shard folder: per sample its shard, byte offset, size and class id."""

    kind = "shards"

    def __init__(self, root: str, shard_names: Sequence[str], shard: np.ndarray, offset: np.ndarray,
                 size: np.ndarray, targets: np.ndarray):
        self.root = root
        self.shard_names = list(shard_names)  # a few hundred strings: not worth packing
        self.shard, self.offset, self.size, self.targets = shard, offset, size, targets
        self._fds: Dict[int, int] = {}
        self._pid = os.getpid()
        self.opens = 0

    def __getstate__(self):  # descriptors stay with the process that opened them
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state

    def __len__(self) -> int:
        return len(self.targets)

    def shard_path(self, shard: int) -> str:
        return os.path.join(self.root, self.shard_names[shard])

    def name(self, index: int) -> str:
        return f"{self.shard_path(int(self.shard[index]))}[sample {index}]"

    def target(self, index: int) -> int:
        return int(self.targets[index])

    def _fd(self, shard: int) -> int:
        if self._pid != os.getpid():  # a forked worker: its own descriptors, opened on first use
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self.shard_path(shard), os.O_RDONLY)
            self.opens += 1
        return fd

    def read(self, index: int) -> bytes:
        shard, size = int(self.shard[index]), int(self.size[index])
        data = os.pread(self._fd(shard), size, int(self.offset[index]))
        if len(data) != size:
            raise DataError(f"shard {self.shard_path(shard)} ends before sample {index} (got {len(data)} of "
                            f"{size} bytes): the shard is truncated; re-run python -m "
                            f"hpc_imagenet.imagenet.data.shards to "
                            f"rewrite it")
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


# ---------------------------------------------------------------- the shard index file

def is_shard_folder(root: str) -> bool:
    return os.path.isfile(os.path.join(root, INDEX_NAME))


def save_index(root: Path, classes: Sequence[str], splits: Dict[str, dict],
               names: Optional[Sequence[str]] = None) -> None:
    """Write the index atomically (hpc_imagenet.imagenet.common.files): it is the last file a conversion writes, so its
    presence means every shard it names is complete. SPLITS maps a split to its shard names,
    shard sizes, samples per shard and the per-sample arrays shard / offset / size / target.
    NAMES, where known (ImageNet's archives), are the classes' human-readable names."""
    header = {"format": FORMAT, "classes": list(classes), **({"class_names": list(names)} if names else {}),
              "splits": {s: {"shards": v["shards"], "shard_bytes": v["shard_bytes"], "samples": v["samples"]}
                         for s, v in splits.items()}}
    arrays = {"header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
    for split, v in splits.items():
        for key, dtype in (("shard", np.int32), ("offset", np.int64), ("size", np.int64), ("target", np.int32)):
            arrays[f"{split}_{key}"] = np.asarray(v[key], dtype=dtype)
    files.atomic_write(root / INDEX_NAME, lambda f: np.savez(f, **arrays))


def load_index(root: str) -> Tuple[List[str], Dict[str, ShardIndex]]:
    """(classes, {split: ShardIndex}) of a shard folder, checked against its shard files."""
    path = os.path.join(root, INDEX_NAME)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(z["header"].tobytes())
            arrays = {k: z[k] for k in z.files if k != "header"}
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"cannot read shard index {path} ({type(e).__name__}: {e}); re-run "
                        "python -m hpc_imagenet.imagenet.data.shards to rewrite it") from None
    if header.get("format") != FORMAT:
        raise DataError(f"{path} is not an index this version reads (format {header.get('format')!r}, expected "
                        f"{FORMAT!r}); re-run python -m hpc_imagenet.imagenet.data.shards")
    out = {}
    for split in SPLITS:
        meta = header["splits"].get(split)
        if meta is None or not meta["samples"] or not sum(meta["samples"]):
            raise DataError(f"shard index {path} has no {split} samples; convert a dataset with train/ and val/")
        out[split] = ShardIndex(root, meta["shards"], *(arrays[f"{split}_{k}"]
                                                        for k in ("shard", "offset", "size", "target")))
        check_shards(out[split], meta)
    return header["classes"], out


def check_shards(index: ShardIndex, meta: dict) -> None:
    """Every shard exists, has the size the index recorded, and holds every byte range pointing
    into it: one stat per shard, so a truncated copy or a stale index fails at start-up, in one line."""
    n = len(index.shard_names)
    if len(index.shard) and (index.shard.min() < 0 or index.shard.max() >= n):
        raise DataError(f"shard index in {index.root} names shards that do not exist (ids outside 0..{n - 1}); "
                        "re-run python -m hpc_imagenet.imagenet.data.shards")
    ends = np.zeros(n, dtype=np.int64)
    np.maximum.at(ends, index.shard, index.offset + index.size)
    for i in range(len(index.shard_names)):
        path = index.shard_path(i)
        try:
            actual = os.stat(path).st_size
        except FileNotFoundError:
            raise DataError(f"shard {path} is missing (the index names it); copy it again or re-run "
                            "python -m hpc_imagenet.imagenet.data.shards") from None
        if actual < ends[i] or actual != meta["shard_bytes"][i]:
            raise DataError(f"shard {path} is {actual} bytes but the index expects {meta['shard_bytes'][i]} "
                            f"(samples up to byte {ends[i]}): truncated or not the shard the index was written for; "
                            "copy it again or re-run python -m hpc_imagenet.imagenet.data.shards")
