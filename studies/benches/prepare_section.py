"""Section "Preparing ImageNet": the import rate of ``python -m hpc_imagenet.imagenet.data.prepare``, from
``python -m studies.benches prepare`` records (arithmetic on recorded numbers only)."""
from __future__ import annotations

from typing import Sequence

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind, newest_sweep
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES
from hpc_imagenet.harness.report.common import md_table
from studies.benches import words

IMAGENET_IMAGES = IMAGENET_TRAIN_IMAGES + IMAGENET_VAL_IMAGES  # the images in the ILSVRC 2012 archives


COLUMNS = ("format", "workers", "images", "archive MB", "s", "images/s", "MB/s", "CPU ms/image", "plain read MB/s",
           "ImageNet at this rate (min)", "host load (1 min)", "record")


def section(recs: Sequence[Record]) -> str:
    # the newest sweep of each format (a sweep may measure one format only)
    rows = [r for fmt in ("shards", "folder")
            for r in newest_sweep([r for r in by_kind(recs, "prepare") if r.point.format == fmt])]
    if not rows:
        return "## Preparing ImageNet\n\n_(no records yet: run `python -m studies.benches prepare`)_\n"
    out = [[p.format, p.workers, m.images, m.bytes / 1e6, m.elapsed_s, m.images_per_s, m.mb_per_s,
            1000 * m.cpu_s / m.images, m.read_mb_per_s, IMAGENET_IMAGES / m.images_per_s / 60, r.host_load_1m, r.source]
           for r in sorted(rows, key=lambda r: (r.point.format, r.point.workers)) for m, p in [(r.metrics, r.point)]]
    return words("prepare.section", table=md_table(COLUMNS, out))
