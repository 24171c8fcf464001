"""ImageNet-like JPEGs for I/O benchmarks: 500x375 RGB, about 110 KB each, in ImageFolder layout.

Decode cost and file size are what matter for loader throughput, so the images mix smooth colour
fields, 8x8 blotches and fine noise: at quality 90 that compresses like a typical ImageNet photo
(~110 KB at 500x375) instead of like a flat test pattern (a few KB) or pure noise (~300 KB).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path
from typing import Dict, Sequence

import numpy as np
from PIL import Image

log = logging.getLogger(__name__)

WIDTH, HEIGHT = 500, 375
QUALITY = 90


def _pixels(rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    img = np.empty((HEIGHT, WIDTH, 3))
    for c in range(3):
        fx, fy = rng.uniform(0.005, 0.05, 2)
        img[..., c] = 127 + 80 * np.sin(x * fx + y * fy + rng.uniform(0, 2 * np.pi))
    blotches = rng.normal(0, 40, (HEIGHT // 8 + 1, WIDTH // 8 + 1, 3)).repeat(8, 0).repeat(8, 1)
    img += blotches[:HEIGHT, :WIDTH] + rng.normal(0, 20, (HEIGHT, WIDTH, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_class(folder: Path, per_class: int, seed: Sequence[int]) -> int:
    rng = np.random.default_rng(list(seed))
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(per_class):
        path = folder / f"img_{i:05d}.JPEG"
        pixels = _pixels(rng)  # drawn even for existing files so contents do not depend on them
        if not path.exists():
            Image.fromarray(pixels).save(path, "JPEG", quality=QUALITY)
        total += path.stat().st_size
    return total


def write_split(root: Path, classes: int, per_class: int, seed: int, processes: int = 1) -> int:
    """Write ``root/<class>/<i>.JPEG``; returns total bytes written. Existing files are kept.

    Each class has its own random stream, so the files are the same whatever ``processes`` is.
    """
    jobs = [(root / f"n{c:08d}", per_class, (seed, c)) for c in range(classes)]
    if processes <= 1:
        return sum(_write_class(*job) for job in jobs)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return sum(pool.starmap(_write_class, jobs))


def ensure_dataset(root: Path, classes: int = 4, train_per_class: int = 64, val_per_class: int = 4,
                   seed: int = 0, processes: int = 1) -> Dict[str, int]:
    """Create (or complete) ``root/train`` and ``root/val``; returns file counts and bytes."""
    log.info("writing ImageNet-like JPEGs under %s (%d classes x %d train)", root, classes, train_per_class)
    train_bytes = write_split(root / "train", classes, train_per_class, seed, processes)
    write_split(root / "val", classes, val_per_class, seed + 1, processes)
    n = classes * train_per_class
    return {"train_images": n, "train_bytes": train_bytes, "mean_image_bytes": train_bytes // max(n, 1)}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="write an ImageNet-like JPEG dataset (train/ and val/)")
    ap.add_argument("root", type=Path)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=64, help="train images per class")
    ap.add_argument("--val-per-class", type=int, default=4)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure_dataset(a.root, a.classes, a.per_class, a.val_per_class, processes=a.processes))
