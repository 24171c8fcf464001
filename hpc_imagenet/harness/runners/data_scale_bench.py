"""Data at scale, measured: ``python -m hpc_imagenet.harness.bench shards``.

Three records kinds (see hpc_imagenet/harness/core/records.py):

``pipeline`` (with ``variant``: the source and backend)
    Images/s per core of the fast backend reading the same ImageNet-like JPEGs (hpc_imagenet/harness/runners/jpegs.py)
    from
    the ImageFolder, from shards of the original bytes and from shards re-encoded at ``--max-side``,
    in lockstep with the baseline backend on the ImageFolder (hpc_imagenet/harness/runners/pipeline_bench.py), so every
    ratio is per round on the same machine state.
``data_opens``
    A seeded multi-epoch run's train loader over the same files in a child process (persistent loader
    workers, as training has them): files opened under the data folder (counted by strace from the
    openat calls of every process; by the dataset's own counter with workers 0) and bytes read
    (``/proc/PID/io`` rchar of the process and its workers), ImageFolder vs shards.
``index_memory``
    Real memory of a 1.28M-sample index, built synthetically (ImageNet-like paths, no files needed:
    the index is what costs memory, not the images): the rank's RSS and each DataLoader worker's
    private (copy-on-write) and proportional memory after the workers read every entry, for the old
    list of (path, class) tuples, the numpy ImageFolder index and the numpy shard index.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import scan, shards, sources
from hpc_imagenet.imagenet.data.loader import build_loaders, set_epoch
from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES
from hpc_imagenet.harness.runners import common, pipeline_bench
from hpc_imagenet.harness.runners.common import proc_io

PARTS = ("pipeline", "opens", "memory")
IO_BATCH = 8  # the opens run's batch: a few images make whole batches (a last partial one is dropped)


# ---------------------------------------------------------------- shard sets of the bench JPEGs

def shard_sets(root: Path, max_sides: List[int], shard_mb: float) -> Dict[str, Path]:
    """{label: folder} for the ImageFolder and its shard conversions, kept beside it: a rerun resumes
    (finds every shard done); a conversion of other files or options is replaced."""
    sets = {"folder": root}
    for side in [None, *max_sides]:
        label = "shards" if side is None else f"shards-max{side}"
        sets[label] = dst = root.parent / f"{root.name}-{label}"
        try:
            shards.convert(str(root), str(dst), shard_mb, os.cpu_count() or 1, shards.Options(max_side=side))
        except DataError as e:
            if "different conversion" not in str(e):
                raise
            shutil.rmtree(dst)
            shards.convert(str(root), str(dst), shard_mb, os.cpu_count() or 1, shards.Options(max_side=side))
    return sets


def pipeline_variants(sets: Dict[str, Path], images: int) -> Dict[str, pipeline_bench.Variant]:
    """baseline on the folder (the reference), fast on every set; the first IMAGES samples each."""
    variants = {}
    for label, path in sets.items():
        _, index = scan.scan_dataset(str(path))
        variants[f"fast+{label}"] = (_First(index["train"], images), "fast")
        if label == "folder":
            variants["baseline"] = (_First(index["train"], images), "baseline")
    return variants


class _First:
    """The first N samples of a source (the bench reads a fixed number of images)."""

    def __init__(self, source, images: int):
        self.source, self.n = source, min(images, len(source))

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name):
        if name == "source":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.source, name)


# ---------------------------------------------------------------- opens and bytes of a run

def run_io(path: str, workers: int, epochs: int) -> dict:
    """EPOCHS epochs of the train split loaded as a seeded training run loads them (build_loaders,
    set_epoch, the fast backend, WORKERS persistent loader workers); /proc/PID/io of this process plus
    that of each worker (read while they still run: with workers > 0 the reads happen there)."""
    cfg = config.parse([path, "--seed", "0", "--workers", str(workers), "-b", str(IO_BATCH), "--image-size", "64",
                        "--data-backend", "fast"], variant="nd")
    train, _, _ = build_loaders(cfg, 0, 1, torch.device("cpu"))
    before, images = proc_io(), 0
    for epoch in range(epochs):
        set_epoch(train, epoch)
        images += sum(len(t) for _, t in train)
    totals = [proc_io(str(p.pid)) for p in multiprocessing.active_children()] + [proc_io()]
    rchar, syscr = (sum(t[k] for t in totals) - before[k] for k in ("rchar", "syscr"))
    return {"images": images, "epochs": epochs, "rchar": rchar, "syscr": syscr,
            "dataset_opens": train.dataset.source.opens if workers == 0 else None,
            "shards": len(getattr(train.dataset.source, "shard_names", []))}


def count_opens(path: Path, workers: int, epochs: int) -> dict:
    """run_io in a child process under strace -f: opens = openat calls naming a file under PATH, by any
    process (the loader workers included); also how many processes opened one, and the most times one
    process opened the same file (1: no file was opened twice by a worker)."""
    strace = shutil.which("strace")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace"
        # --seccomp-bpf: the kernel stops the traced processes only at open/openat, not at every system call
        # (a traced Python importing torch otherwise runs several times slower)
        wrap = [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=open,openat", "-o", str(trace)] if strace else []
        result = _in_child(run_io, str(path), workers, epochs, wrap=wrap)
        if strace:
            result.update(_opens(trace.read_text(), path))
    return result


def _opens(trace: str, path: Path) -> dict:
    """Successful opens of files (not folders) under PATH in an ``strace -f -o`` trace, whose lines
    start with the calling process's pid."""
    named = re.compile(rf'^\s*(\d+)\s+open(?:at)?\(.*"({re.escape(str(path.resolve()))}/[^"]*)"')
    opened: Counter = Counter()  # (pid, file) -> opens
    for line in trace.splitlines():
        match = named.match(line)
        if match and "O_DIRECTORY" not in line and "= -1" not in line:
            opened[match.groups()] += 1
    return {"opens": sum(opened.values()), "opening_processes": len({pid for pid, _ in opened}),
            "max_opens_per_file": max(opened.values(), default=0)}


# ---------------------------------------------------------------- memory of a 1.28M-sample index

def synthetic_samples(images: int = IMAGENET_TRAIN_IMAGES, classes: int = 1000) -> List[tuple]:
    """ImageNet-like (path, class) pairs: /datasets/imagenet/train/n01440764/n01440764_10026.JPEG."""
    return [(f"/datasets/imagenet/train/n{1440764 + i % classes:08d}/n{1440764 + i % classes:08d}_{i:d}.JPEG",
             i % classes) for i in range(images)]


class _TouchAll(IterableDataset):
    """Every worker reads every entry's name and class, as ImageFiles does before opening a file
    (no I/O): what each worker of a long run has done after a few random-order epochs."""

    def __init__(self, index):
        self.index = index

    def __iter__(self):
        n, chunk, total = len(self.index), 1 << 16, 0
        for i, (path, target) in enumerate(self.index, 1):  # the indexes iterate as the list does: (name, class)
            total += target + len(path)
            if i % chunk == 0 or i == n:
                yield total
                total = 0


def _build(kind: str, images: int):
    # the arrays the shard index holds, for 1.28M samples in ~550 shards of ~256 MB (more shards than
    # the default 1 GB gives, so an upper bound)
    if kind == "shards":
        size = np.full(images, 110_000, dtype=np.int64)
        per = 2400
        shard = (np.arange(images) // per).astype(np.int32)
        offset = (np.arange(images) % per) * 110_592 + 512
        names = [f"train-{i:06d}.tar" for i in range(int(shard[-1]) + 1)]
        return sources.ShardIndex("/datasets/imagenet-shards", names, shard, offset, size,
                                  (np.arange(images) % 1000).astype(np.int32))
    samples = synthetic_samples(images)
    return samples if kind == "list" else sources.FolderIndex.from_samples(samples)


def _mem(pid: str = "self") -> Dict[str, int]:
    """kB figures of /proc/PID/smaps_rollup: Rss, Pss, private (clean + dirty) pages."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"rss_bytes": fields["Rss"], "pss_bytes": fields["Pss"],
            "private_bytes": fields["Private_Clean"] + fields["Private_Dirty"]}


def index_memory(kind: str, images: int, workers: int) -> dict:
    """Build the index, let WORKERS DataLoader workers read every entry, then measure every process."""
    base = _mem()["rss_bytes"]
    index = _build(kind, images)
    rank = _mem()
    loader = DataLoader(_TouchAll(index), batch_size=None, num_workers=workers, persistent_workers=True,
                        multiprocessing_context="fork")
    touched = sum(1 for _ in loader)  # chunks read, all workers together
    pids = [p.pid for p in multiprocessing.active_children()]
    per_worker = [_mem(str(pid)) for pid in pids]
    del loader
    return {"touched": touched, "rank_rss_bytes": rank["rss_bytes"],
            "rank_index_bytes": rank["rss_bytes"] - base, "workers": len(per_worker),
            "worker_private_bytes": max(w["private_bytes"] for w in per_worker),
            "worker_pss_bytes": max(w["pss_bytes"] for w in per_worker),
            "worker_rss_bytes": max(w["rss_bytes"] for w in per_worker)}


def _in_child(fn: Callable[..., dict], *args: object, wrap: Sequence[str] = ()) -> dict:
    """FN(*ARGS)'s result (JSON) from a fresh Python process, run under the command WRAP (e.g. strace)."""
    cmd = [*wrap, sys.executable, "-c", f"import json; from {fn.__module__} import {fn.__name__}; "
           f"print(json.dumps({fn.__name__}{args!r}))"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the bench command

def add_parser(sub, flags) -> None:
    s = sub.add_parser("shards", parents=[flags], help="data at scale: per-core rates from folder vs shards, "
                       "files opened and bytes read per epoch, memory of a 1.28M-sample index")
    s.add_argument("--data", help="ImageFolder root with train/ and val/ (default: generated ImageNet-like JPEGs)")
    s.add_argument("--images", type=int, default=512, help="images per pipeline pass")
    s.add_argument("--max-side", type=int, nargs="+", default=[320], help="re-encoded shard sets")
    s.add_argument("--shard-size", type=float, default=16, help="MB per shard of the bench conversions")
    s.add_argument("--loader-workers", type=int, default=4, help="DataLoader workers of the memory points")
    s.add_argument("--io-workers", type=int, default=2, help="loader workers of the opens run")
    s.add_argument("--io-epochs", type=int, default=3, help="epochs of the opens run (a seeded run)")
    common.add_flags(s, rounds=5, workers=[0], image_size=224, batch=32, index_samples=IMAGENET_TRAIN_IMAGES)
    s.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)


def run(args) -> List[dict]:
    root = common.jpeg_root(args.data, 4, -(-args.images // 4))
    sweep = common.new_sweep("shards", args)
    if "pipeline" in args.parts:
        sets = shard_sets(root, args.max_side, args.shard_size)
        common.progress(1, 3, f"shards pipeline: {', '.join(sets)}, {args.images} images, {args.rounds} rounds")
        results = pipeline_bench.bench_variants(pipeline_variants(sets, args.images), args.workers, args.image_size,
                                                args.batch, args.rounds)
        pipeline_bench.record(sweep, results, "variant", "pipeline", image_size=args.image_size,
                              images=args.images, data=str(root))
    if "opens" in args.parts:
        sets = shard_sets(root, [], args.shard_size)
        common.progress(2, 3, f"shards opens: a seeded run of {args.io_epochs} epochs, {args.io_workers} workers, "
                        "per source under strace")
        for label, path in sets.items():
            m = count_opens(path, args.io_workers, args.io_epochs)
            sweep.add({"source": label, "data": str(path), "workers": args.io_workers, "epochs": args.io_epochs,
                       "seeded": True, "batch": IO_BATCH, "strace": "opens" in m}, m, kind="data_opens")
    if "memory" in args.parts:
        for kind in ("list", "folder", "shards"):
            common.progress(3, 3, f"index memory: {kind}, {args.index_samples} samples, {args.loader_workers} workers")
            # in a fresh child process, so one kind's garbage cannot inflate the next
            sweep.add({"index": kind, "samples": args.index_samples, "workers": args.loader_workers},
                      _in_child(index_memory, kind, args.index_samples, args.loader_workers), kind="index_memory")
    return sweep.done
