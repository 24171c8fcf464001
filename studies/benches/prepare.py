"""Preparing ImageNet from its archives, measured: ``python -m studies.benches prepare``.

Builds a download in the official layout (studies/benches/archive_set.py) from generated ImageNet-like
JPEGs (hpc_imagenet/harness/runners/jpegs.py: 500x375, ~110 KB), then times ``hpc_imagenet.imagenet.data.prepare`` on
it for each
``--format`` and ``--workers``: the whole import (indexing the per-class tars, writing every shard or
class folder made durable, the index last) into an empty folder, as one ``prepare`` record each:
images/s, MB/s of the archives (1e6 bytes) and CPU seconds. For scale, each record also carries
``read_mb_per_s``, the rate of a plain sequential read of the same archives on the same disk just
before (the "limited by reading the archive" line): the page cache is warm for both, so this is the
CPU cost of an import, not the throughput of a cold disk.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import List

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.imagenet.data import archives, prepare
from hpc_imagenet.harness.runners import jpegs
from hpc_imagenet.harness.runners.common import add_flags, new_sweep
from studies.benches import archive_set

log = logging.getLogger(__name__)
READ_CHUNK = 16 << 20


def ensure_download(scratch: Path, classes: int, per_class: int, val_per_class: int) -> Path:
    """The generated download for this size, built once (its JPEGs too) and reused."""
    out = scratch / f"prepare-download-{classes}x{per_class}+{val_per_class}"
    if (out / archives.DEVKIT).is_file():
        return out
    folder = scratch / f"prepare-jpegs-{classes}x{per_class}+{val_per_class}"
    jpegs.ensure_dataset(folder, classes=classes, train_per_class=per_class, val_per_class=val_per_class,
                         processes=os.cpu_count() or 1)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    archive_set.write_download(folder, tmp, "devkit")
    os.replace(tmp, out)  # the devkit is written last: a folder under the final name is complete
    return out


def read_rate(download: Path) -> float:
    """MB/s of reading the two image archives front to back."""
    t0, total = time.monotonic(), 0
    for name in (archives.TRAIN_TAR, archives.VAL_TAR):
        with open(download / name, "rb") as f:
            while chunk := f.read(READ_CHUNK):
                total += len(chunk)
    return total / 1e6 / (time.monotonic() - t0)


def measure(download: Path, dst: Path, fmt: str, workers: int, shard_mb: float) -> dict:
    shutil.rmtree(dst, ignore_errors=True)
    read_mb_per_s = read_rate(download)
    cpu0, t0 = cputime.process_tree_cpu_s(), time.monotonic()
    counts = prepare.prepare(str(download), str(dst), fmt, shard_mb, workers)
    elapsed, cpu = time.monotonic() - t0, cputime.process_tree_cpu_s() - cpu0  # this process and its workers
    images = counts["train_samples"] + counts["val_samples"]
    nbytes = archive_set.download_bytes(download)
    written = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    shutil.rmtree(dst)
    return {"images_per_s": images / elapsed, "mb_per_s": nbytes / 1e6 / elapsed, "elapsed_s": elapsed,
            "images": images, "bytes": nbytes, "written_bytes": written, "cpu_s": cpu,
            "read_mb_per_s": read_mb_per_s, "files": counts.get("train_shards", 0) + counts.get("val_shards", 0)
            if fmt == "shards" else images}


def add_parser(sub, common) -> None:
    s = sub.add_parser("prepare", parents=[common],
                       help="conversion rate of python -m hpc_imagenet.imagenet.data.prepare on a "
                       "generated download of ImageNet-like JPEGs")
    add_flags(s, classes=8, val_per_class=16, workers=[1, 2])
    s.add_argument("--per-class", type=int, default=128, help="train images per class")
    s.add_argument("--format", nargs="+", default=["shards", "folder"], choices=["shards", "folder"])
    s.add_argument("--shard-size", type=float, default=32, help="MB per shard (small sets need small shards "
                   "to have several)")
    s.add_argument("--work-dir", type=Path, help="where the generated download and the outputs go "
                   "(default results/scratch)")


def run(args, scratch: Path) -> List[dict]:
    """The sweep of ``python -m studies.benches prepare``: one record per --format x --workers."""
    scratch = args.work_dir or scratch
    download = ensure_download(scratch, args.classes, args.per_class, args.val_per_class)
    sweep = new_sweep("prepare", args)
    points = [(fmt, w) for fmt in args.format for w in args.workers]
    for i, (fmt, workers) in enumerate(points, 1):
        log.info("[%d/%d] prepare --format %s --workers %d", i, len(points), fmt, workers)
        point = {"format": fmt, "workers": workers, "classes": args.classes, "per_class": args.per_class,
                 "val_per_class": args.val_per_class, "shard_mb": args.shard_size,
                 "data": "hpc_imagenet/harness/runners/jpegs.py 500x375"}
        metrics = measure(download, scratch / "prepare-out", fmt, workers, args.shard_size)
        sweep.add(point, metrics)
        log.info("  %.0f images/s, %.1f MB/s (plain read %.0f MB/s), %.1f CPU s", metrics["images_per_s"],
                 metrics["mb_per_s"], metrics["read_mb_per_s"], metrics["cpu_s"])
    return sweep.done
