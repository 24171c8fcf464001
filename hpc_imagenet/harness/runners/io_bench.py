"""Data-loading throughput without a model: images/s and MB/s against loader workers, concurrent
reader processes (what N ranks on one node do to the filesystem) and decoding backend, with the
page cache cold or warm.

Counters come from ``/proc/self/io`` of the reading process. DataLoader workers are child
processes; the kernel adds a child's counters to its parent's when the child is reaped, so a
delta taken before the loader starts and after its workers exit covers the workers too.
``read_bytes`` is what reached the storage layer (0 when everything came from the page cache),
``rchar`` what passed through read() calls, ``syscr`` how many read calls were made.

CPU cost: user + system seconds of the reader and its loader workers (``hpc_imagenet.imagenet.common.cputime``: the
process tree), so ``images_per_cpu_s`` is images/s per fully busy
core whatever the worker count: the number that says how many cores a backend needs to feed a GPU.

Cold cache: pages of the dataset's files are evicted with ``posix_fadvise(POSIX_FADV_DONTNEED)``
after ``os.sync()``. That needs no privilege and leaves the rest of a shared machine's cache
alone (``/proc/sys/vm/drop_caches`` would drop everyone's). Whether the eviction worked is
checked, not assumed: a cold point is marked ``cold_verified`` only when at least half of the
bytes it read came from storage. Network filesystems may ignore the hint; the record says so.
"""
from __future__ import annotations

import functools
import logging
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.harness.runners.common import proc_io
from hpc_imagenet.harness.runners.procs import spawn, torch_threads

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DatasetBuilder = Callable[[Path, int], Dataset]


@dataclass(frozen=True)
class IOPoint:
    """One measurement: how the files are read."""

    backend: str
    workers: int
    readers: int
    cache: str  # "cold" or "warm"
    batch_size: int
    image_size: int
    images_per_reader: int
    threads: int = 1  # torch intra-op threads of each reader, as in a DataLoader worker


# ---------------------------------------------------------------- backends

def _torchvision_imagefolder(root: Path, image_size: int) -> Dataset:
    """The classic pipeline: ImageFolder + RandomResizedCrop + flip + ToTensor + Normalize."""
    from torchvision import datasets, transforms
    tf = transforms.Compose([transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return datasets.ImageFolder(str(root / "train"), transform=tf)


def _engine_dataset(name: str, root: Path, image_size: int) -> Dataset:
    """A backend registered in hpc_imagenet.imagenet.data.decode (the one --data-backend picks in training)."""
    from hpc_imagenet.imagenet.data import decode, loader, scan
    _, samples = scan.scan_dataset(str(root))
    return loader.ImageFiles(samples["train"], decode.transform(name, True, image_size))


def available_backends() -> Dict[str, DatasetBuilder]:
    """torchvision's ImageFolder always; every per-sample backend hpc_imagenet.imagenet.data.decode registers, when it
    imports."""
    backends: Dict[str, DatasetBuilder] = {"torchvision": _torchvision_imagefolder}
    try:
        from hpc_imagenet.imagenet.data import decode
        for name in decode.per_sample_names():
            backends[name] = functools.partial(_engine_dataset, name)  # picklable for spawn
    except Exception as e:  # the engine's data module is optional for this benchmark
        log.warning("hpc_imagenet.imagenet.data backends unavailable (%s); measuring torchvision only", e)
    return backends


def dataset_files(ds: Dataset) -> List[str]:
    """Paths behind an ImageFolder-like dataset: torchvision's ``samples`` of (path, class), or the
    engine's sample source (iterating it gives (name, class) pairs)."""
    samples = ds.source if hasattr(ds, "source") else ds.samples
    return [p for p, _ in samples]


# ---------------------------------------------------------------- page cache and counters

def evict(paths: Sequence[str]) -> str:
    """Drop the files' pages from the page cache; returns the method used."""
    os.sync()  # dirty pages cannot be dropped
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise(DONTNEED)"


def warm(paths: Sequence[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


# ---------------------------------------------------------------- one reader

def read_shard(ds: Dataset, indices: List[int], workers: int, batch_size: int,
               threads: int = 1) -> Dict[str, float]:
    """Iterate a DataLoader over ``indices``; the time includes worker start-up (first_batch_s).

    With workers=0 the decoding runs here, so this process gets the thread count a DataLoader
    worker would have (1 by default): on a busy node, 2+ intra-op threads on float transforms
    were measured 10x slower than 1 (spin-waiting threads), which is not what loading costs.
    """
    files = dataset_files(ds)
    nbytes = sum(os.path.getsize(files[i]) for i in indices)
    with torch_threads(threads):
        before, cpu0 = proc_io(), cputime.process_tree_cpu_s()
        t0 = time.monotonic()
        loader = DataLoader(Subset(ds, indices), batch_size=batch_size, num_workers=workers, shuffle=False)
        images, first = 0, None
        for batch in loader:
            images += len(batch[1])
            if first is None:
                first = time.monotonic()
        t1 = time.monotonic()
        del loader  # joins and reaps the workers, so their counters reach this process
        after, cpu1 = proc_io(), cputime.process_tree_cpu_s()
    io = {k: after[k] - before.get(k, 0) for k in ("rchar", "read_bytes", "syscr") if k in after}
    return {"images": images, "bytes": nbytes, "start": t0, "end": t1, "cpu_s": cpu1 - cpu0,
            "first_batch_s": (first or t1) - t0, **io}


def _reader_proc(builder: DatasetBuilder, root: str, point: IOPoint, rank: int, order: List[int],
                 barrier, queue) -> None:
    try:
        ds = builder(Path(root), point.image_size)
        indices = order[rank::point.readers][:point.images_per_reader]
        barrier.wait(timeout=600)  # start together: import and setup time is not measured
        queue.put((rank, read_shard(ds, indices, point.workers, point.batch_size, point.threads)))
    except BaseException as e:  # the parent records the failure with this message
        queue.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def run_readers(builder: DatasetBuilder, root: Path, point: IOPoint, order: List[int]) -> List[Dict]:
    """``point.readers`` processes reading disjoint shards at the same time (as N ranks do)."""
    if point.readers == 1:
        ds = builder(root, point.image_size)
        return [read_shard(ds, order[:point.images_per_reader], point.workers, point.batch_size, point.threads)]
    barrier = mp.get_context("spawn").Barrier(point.readers)
    results = dict(spawn(_reader_proc, [(builder, str(root), point, r, order, barrier) for r in range(point.readers)],
                         point.readers, timeout_s=900))
    return [results[r] for r in range(point.readers)]


# ---------------------------------------------------------------- one point

def measure(builder: DatasetBuilder, root: Path, point: IOPoint, order: List[int],
            files: Sequence[str]) -> Dict[str, object]:
    """Metrics of one point (raises on reader failure)."""
    method = evict(files) if point.cache == "cold" else (warm(files) or "pre-read")
    parts = run_readers(builder, root, point, order)
    errors = [p["error"] for p in parts if "error" in p]
    if errors:
        raise RuntimeError(errors[0])
    elapsed = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    images = sum(p["images"] for p in parts)
    nbytes = sum(p["bytes"] for p in parts)
    m: Dict[str, object] = {"images": images, "elapsed_s": elapsed, "images_per_s": images / elapsed,
                            "mb_per_s": nbytes / elapsed / 1e6, "files_per_s": images / elapsed,
                            "bytes_per_image": nbytes / max(images, 1),
                            "first_batch_s": max(p["first_batch_s"] for p in parts), "cache_method": method,
                            **cpu_metrics(sum(p["cpu_s"] for p in parts), images, elapsed)}
    if all("rchar" in p for p in parts):
        for k in ("rchar", "read_bytes", "syscr"):
            m[k] = sum(p[k] for p in parts)
        m["storage_mb_per_s"] = m["read_bytes"] / elapsed / 1e6
        m["syscr_per_s"] = m["syscr"] / elapsed
        m["cold_verified"] = point.cache == "cold" and m["read_bytes"] >= 0.5 * nbytes
    return m


def cpu_metrics(cpu_s: float, images: int, elapsed_s: float) -> Dict[str, float]:
    """Per-core figures from the CPU seconds all readers and their workers spent."""
    cpu_s = max(cpu_s, 1e-9)  # rusage ticks are coarse; never divide by zero on a tiny point
    return {"cpu_s": cpu_s, "cpu_ms_per_image": 1e3 * cpu_s / max(images, 1),
            "images_per_cpu_s": images / cpu_s, "cores_busy": cpu_s / elapsed_s}


def points(backends: Sequence[str], workers: Sequence[int], readers: Sequence[int],
           caches: Sequence[str], batch_size: int, image_size: int, images: int,
           reader_workers: int = 0, threads: int = 1) -> List[IOPoint]:
    """Workers sweep with one reader, then readers sweep with ``reader_workers`` each."""
    pts = []
    for b in backends:
        for c in caches:
            pts += [IOPoint(b, w, 1, c, batch_size, image_size, images, threads) for w in workers]
            pts += [IOPoint(b, reader_workers, r, c, batch_size, image_size, images, threads)
                    for r in readers if r > 1]
    return pts


def shuffled_order(count: int, seed: int = 0) -> List[int]:
    """Random access order, as a shuffling sampler reads an epoch."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(count, generator=g).tolist()

