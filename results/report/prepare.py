"""RESULTS.md section "Preparing ImageNet": the import rate of ``python -m imagenet.prepare``, from
``python -m results.bench prepare`` records (arithmetic on recorded numbers only)."""
from __future__ import annotations

from typing import Sequence

from results.core.kinds import Record
from results.core.records import by_kind, newest_sweep
from results.core.setups import IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES
from results.report.common import md_table

IMAGENET_IMAGES = IMAGENET_TRAIN_IMAGES + IMAGENET_VAL_IMAGES  # the images in the ILSVRC 2012 archives


def section(recs: Sequence[Record]) -> str:
    # the newest sweep of each format (a sweep may measure one format only)
    rows = [r for fmt in ("shards", "folder")
            for r in newest_sweep([r for r in by_kind(recs, "prepare") if r.point.format == fmt])]
    if not rows:
        return "## Preparing ImageNet\n\n_(no records yet: run `python -m results.bench prepare`)_\n"
    out = []
    for r in sorted(rows, key=lambda r: (r.point.format, r.point.workers)):
        m, p = r.metrics, r.point
        out.append([p.format, p.workers, m.images, m.bytes / 1e6, m.elapsed_s, m.images_per_s,
                    m.mb_per_s, 1000 * m.cpu_s / m.images, m.read_mb_per_s,
                    IMAGENET_IMAGES / m.images_per_s / 60, r.host_load_1m, r.source])
    return ("## Preparing ImageNet\n\n`python -m results.bench prepare` builds a download in the official layout "
            "(results/runners/archive_set.py) from ImageNet-like JPEGs (results/runners/jpegs.py, 500x375, ~110 KB) "
            "and times "
            "`python -m imagenet.prepare` on it, archives to a complete, durable output (each shard fsynced, each "
            "class folder synced, the index last), the newest sweep of each format. "
            "The plain read rate is a sequential read of the same archives just before (page cache warm for both). "
            "The ImageNet column is the archives' 1,331,167 images at the measured rate.\n\n"
            + md_table(["format", "workers", "images", "archive MB", "s", "images/s", "MB/s", "CPU ms/image",
                        "plain read MB/s", "ImageNet at this rate (min)", "host load (1 min)", "record"], out))
