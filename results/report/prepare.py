"""RESULTS.md section "Preparing ImageNet": the import rate of ``python -m imagenet.prepare``, from
``python -m results.bench prepare`` records (arithmetic on recorded numbers only)."""
from __future__ import annotations

from typing import Callable, Sequence

from results.report.data_scale import newest

IMAGENET_IMAGES = 1_281_167 + 50_000  # train + validation images in the ILSVRC 2012 archives


def section(recs: Sequence[dict], table: Callable) -> str:
    # the newest sweep of each format (a sweep may measure one format only)
    by_format = {fmt: [r for r in recs if r["kind"] == "prepare" and r["point"]["format"] == fmt]
                 for fmt in ("shards", "folder")}
    rows = [r for group in by_format.values() for r in newest(group, "prepare")]
    if not rows:
        return "## Preparing ImageNet\n\n_(no records yet: run `python -m results.bench prepare`)_\n"
    out = []
    for r in sorted(rows, key=lambda r: (r["point"]["format"], r["point"]["workers"])):
        m, p = r["metrics"], r["point"]
        out.append([p["format"], p["workers"], m["images"], m["bytes"] / 1e6, m["elapsed_s"], m["images_per_s"],
                    m["mb_per_s"], 1000 * m["cpu_s"] / m["images"], m["read_mb_per_s"],
                    IMAGENET_IMAGES / m["images_per_s"] / 60, r.get("host_load_1m"), r["_source"]])
    return ("## Preparing ImageNet\n\n`python -m results.bench prepare` builds a download in the official layout "
            "(results/runners/archive_set.py) from ImageNet-like JPEGs (results/runners/jpegs.py, 500x375, ~110 KB) "
            "and times "
            "`python -m imagenet.prepare` on it, archives to a complete, durable output (each shard fsynced, each "
            "class folder synced, the index last), the newest sweep of each format. "
            "The plain read rate is a sequential read of the same archives just before (page cache warm for both). "
            "The ImageNet column is the archives' 1,331,167 images at the measured rate.\n\n"
            + table(["format", "workers", "images", "archive MB", "s", "images/s", "MB/s", "CPU ms/image",
                     "plain read MB/s", "ImageNet at this rate (min)", "host load (1 min)", "record"], out))
