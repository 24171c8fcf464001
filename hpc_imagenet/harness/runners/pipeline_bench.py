"""Per-core decode cost of the data backends: ``python -m hpc_imagenet.harness.bench pipeline`` records it,
``python -m hpc_imagenet.harness.pipeline_bench`` prints it.

The harness lives here, not in hpc_imagenet/imagenet/data/decode/, because the engine never imports the harness
(generated JPEGs come from hpc_imagenet.harness.runners.jpegs). A "variant" is a backend reading a source: the same
backend over an ImageFolder, over shards of the original bytes or over re-encoded shards, each
measured in lockstep with the baseline on the ImageFolder, so the ratio is per round on the same
machine state.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.imagenet.data import decode
from hpc_imagenet.imagenet.data.decode.augment import NONE, Augmentation
from hpc_imagenet.imagenet.data.loader import ImageFiles
from hpc_imagenet.imagenet.data.scan import scan_dataset
from hpc_imagenet.harness.core.records import group_by
from hpc_imagenet.harness.runners.jpegs import ensure_dataset  # ImageNet-like 500x375 ~110 KB JPEGs
from hpc_imagenet.harness.runners.procs import torch_threads

log = logging.getLogger(__name__)

Variant = Tuple[object, str]  # (source: a FolderIndex, ShardIndex or list of (path, class), backend name)

@dataclass(frozen=True)
class Measurement:
    """One pass of a backend over the files: images, wall seconds, CPU seconds (all processes)."""

    backend: str
    split: str
    workers: int
    images: int
    wall_s: float
    cpu_s: float
    round: int = 0

    @property
    def per_core(self) -> float:
        """Images per CPU-second: per-core throughput, robust to other load on a shared machine."""
        return self.images / self.cpu_s

    @property
    def wall_rate(self) -> float:
        return self.images / self.wall_s


def measure(label: str, variant: Variant, train: bool, image_size: int, workers: int,
            batch_size: int, seed: int = 0, augment: Augmentation = NONE) -> Measurement:
    """Steady-state pass over every sample through a DataLoader.

    workers=0 loads in this process on one thread. With workers, a first pass starts them (fork,
    first-touch page faults: a one-off cost per run) and the second pass is measured, counting the
    CPU time of the workers and of this process, which receives the batches.
    """
    source, backend = variant
    dataset = ImageFiles(source, decode.transform(backend, train, image_size, augment=augment))
    torch.manual_seed(seed)
    with torch_threads(1):  # per core means one core: no intra-op threads in the measured process
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=False,
                            persistent_workers=workers > 0, generator=torch.Generator().manual_seed(seed))
        if workers:
            sum(len(target) for _, target in loader)
        cpu0, wall0 = cputime.process_tree_cpu_s(), time.perf_counter()  # the workers are live children
        images = sum(len(target) for _, target in loader)
        wall, cpu = time.perf_counter() - wall0, cputime.process_tree_cpu_s() - cpu0
        del loader  # shuts persistent workers down
    return Measurement(label, "train" if train else "val", workers, images, wall, cpu)


def measure_in_process(variants: Dict[str, Variant], train: bool, image_size: int,
                       batch_size: int, seed: int = 0, augment: Augmentation = NONE) -> List[Measurement]:
    """workers=0, all variants in lockstep: batch k of each, back to back, timed by this thread's CPU
    clock, so the machine's busy and quiet moments fall on every variant alike."""
    backends = list(variants)
    with torch_threads(1):
        sets = [ImageFiles(src, decode.transform(b, train, image_size, augment=augment))
                for src, b in variants.values()]
        iters = [iter(DataLoader(s, batch_size=batch_size)) for s in sets]
        cpu, wall, images = [0.0] * len(backends), [0.0] * len(backends), [0] * len(backends)
        for _ in range(-(-min(len(s) for s in sets) // batch_size)):
            for i, it in enumerate(iters):
                torch.manual_seed(seed + images[i])  # same boxes for every backend that draws them alike
                c0, w0 = time.thread_time(), time.perf_counter()
                images[i] += len(next(it)[1])
                cpu[i] += time.thread_time() - c0
                wall[i] += time.perf_counter() - w0
    split = "train" if train else "val"
    return [Measurement(b, split, 0, n, w, c) for b, n, w, c in zip(backends, images, wall, cpu)]


def bench(samples, backends: Sequence[str], workers: Sequence[int], image_size: int,
          batch_size: int, rounds: int, augment: Augmentation = NONE) -> List[Measurement]:
    """Every backend over the same samples (see bench_variants)."""
    return bench_variants({b: (samples, b) for b in backends}, workers, image_size, batch_size, rounds, augment)


def bench_variants(variants: Dict[str, Variant], workers: Sequence[int], image_size: int, batch_size: int,
                   rounds: int, augment: Augmentation = NONE) -> List[Measurement]:
    """Rounds of every variant back to back (in lockstep in process), so slow phases of a shared
    machine hit all alike; AUGMENT (a policy, erasing) applies to the training split of every one."""
    results = []
    for r in range(rounds):
        for split in ("train", "val"):
            for w in workers:
                if w == 0:
                    ms = measure_in_process(variants, split == "train", image_size, batch_size, seed=r,
                                            augment=augment)
                else:
                    ms = [measure(label, v, split == "train", image_size, w, batch_size, seed=r, augment=augment)
                          for label, v in variants.items()]
                for m in ms:
                    m = dataclasses.replace(m, round=r)
                    log.info("round %d %-8s %-5s workers=%d  %.0f img/s per core, %.0f img/s wall", r, m.backend,
                             split, w, m.per_core, m.wall_rate)
                    results.append(m)
    return results


def summarize(results: List[Measurement], reference: str = "baseline") -> List[dict]:
    """Medians over rounds of each (split, workers, backend), named as a record's metrics. The ratio
    to the reference is the median of per-round ratios: both ran back to back, so a busy phase of the
    machine cancels."""
    groups = group_by(results, lambda m: (m.split, m.workers, m.backend))
    rows = []
    for (split, workers, backend), ms in groups.items():
        ref = {m.round: m.per_core for m in groups.get((split, workers, reference), [])}
        ratios = [m.per_core / ref[m.round] for m in ms if m.round in ref]
        rows.append({"split": split, "workers": workers, "backend": backend, "rounds": len(ms),
                     "images_per_cpu_s": statistics.median(m.per_core for m in ms),
                     "images_per_s": statistics.median(m.wall_rate for m in ms),
                     "cpu_ms_per_image": 1000 * statistics.median(m.cpu_s / m.images for m in ms),
                     "ratio_per_core": statistics.median(ratios) if ratios else None,
                     "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None)})
    return rows


def record(sweep, results: List[Measurement], name: str, kind: Optional[str] = None, **point: object) -> List[dict]:
    """One record per summary row into SWEEP (a records.Sweep): its backend (as NAME), split and workers then
    POINT as the point, the rest of the row as the metrics; the rows."""
    rows = summarize(results)
    for row in rows:
        sweep.add({name: row["backend"], "split": row["split"], "workers": row["workers"], **point},
                  {k: v for k, v in row.items() if k not in ("split", "workers", "backend")}, kind=kind)
    return rows


def bench_samples(root: Optional[str], images: int) -> List[Tuple[str, int]]:
    """The first IMAGES train samples of ROOT (default: generated ImageNet-like JPEGs)."""
    if root is None:
        root = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hpc-imagenet-jpegs")
        ensure_dataset(Path(root), classes=4, train_per_class=max(1, -(-images // 4)), val_per_class=1)
    _, index = scan_dataset(root)
    train = index["train"]
    return [(train.name(i), train.target(i)) for i in range(min(images, len(train)))]
