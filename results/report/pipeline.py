"""Report section: the data pipeline's backends against the baseline (per core and wall clock)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from results.analysis import comparisons
from results.core.kinds import Record
from results.report import figures
from results.report.common import Environments, md_table


def _io_category(record: Record, multi_sweep: bool) -> str:
    p = record.point
    cat = f"{p.workers} workers, {p.cache}"
    return f"{cat}\n[{record.sweep}]" if multi_sweep else cat


def steady_pipeline_table(steady: Sequence[Record], env: Environments) -> str:
    """The lockstep, steady-state records (``results.bench pipeline``): the per-core ratio that counts."""
    if not steady:
        return "_(no steady-state pipeline records yet: run `python -m results.bench pipeline`)_\n"
    rows = [[r.point.backend, r.point.split, r.point.workers, r.point.image_size,
             r.point.images, r.metrics.rounds, r.metrics.cpu_ms_per_image,
             r.metrics.images_per_cpu_s, r.metrics.images_per_s,
             comparisons.times(r.metrics.ratio_per_core),
             (f"{comparisons.times(r.metrics.ratio_min)}-{comparisons.times(r.metrics.ratio_max)}"
              if r.metrics.ratio_min else "-"), r.host_load_1m, env.id(r), r.source]
            for r in sorted(steady, key=lambda r: (r.sweep, r.point.split, r.point.workers,
                                                   r.point.backend))]
    return md_table(["backend", "split", "workers", "image size", "images", "rounds", "CPU ms/image",
                     "images/s per core", "images/s wall", "per-core ratio vs baseline (median of rounds)",
                     "ratio range", "host load (1 min)", "env", "record"], rows)


def pipeline_section(io: Sequence[Record], steady: Sequence[Record], env: Environments, fig_dir: Path) -> str:
    rows = comparisons.pipeline_rows(io)
    multi = len({x["record"].sweep for x in rows}) > 1
    cats = list(dict.fromkeys(_io_category(x["record"], multi) for x in rows))
    backends = sorted({x["record"].point.backend for x in rows})

    def panel(metric: str, ylabel: str, title: str, ratio: Optional[str]) -> dict:
        cell = {(_io_category(x["record"], multi), x["record"].point.backend): x for x in rows}
        bars = [{"label": b, "values": [getattr(cell[(c, b)]["record"].metrics, metric) if (c, b) in cell else None
                                        for c in cats],
                 "texts": [comparisons.times(cell[(c, b)][ratio]) if ratio and (c, b) in cell and cell[(c, b)][ratio]
                           else "" for c in cats]} for b in backends]
        return {"title": title, "ylabel": ylabel, "categories": cats, "bars": bars,
                "empty": "no io records with CPU accounting (rerun `python -m results.bench io`)"}
    figures.bars(fig_dir / "pipeline_per_core.png", [
        panel("images_per_cpu_s", "images/s per core (images per CPU second)",
              "per core: labels = ratio to the baseline backend", "per_core_ratio"),
        panel("images_per_s", "images/s (wall clock, one reader)", "wall clock: labels = ratio to baseline",
              "wall_ratio"),
    ], "Data pipeline by backend: decode + train augmentation, one reader, same JPEGs")
    table = [[x["record"].point.backend, x["record"].point.cache, x["record"].point.workers,
              x["record"].point.image_size, x["record"].metrics.images,
              x["record"].metrics.bytes_per_image,
              x["record"].metrics.images_per_s, x["record"].metrics.cpu_ms_per_image,
              x["record"].metrics.images_per_cpu_s, x["record"].metrics.cores_busy,
              comparisons.times(x["per_core_ratio"]), comparisons.times(x["wall_ratio"]),
              x["record"].host_load_1m,
              env.id(x["record"]), x["record"].source] for x in rows]
    return ("## Data pipeline vs the baseline\n\n![pipeline per core](figures/pipeline_per_core.png)\n\n"
            "Each backend reads the same generated ImageNet-like JPEGs (`results/runners/jpegs.py`: 500x375, ~110 KB) "
            "in the same order with the same train augmentation (random-resized crop to the image size + "
            "flip). CPU = user + system seconds of the reader and its DataLoader workers (`getrusage`, "
            "workers counted once reaped); images/s per core = images / CPU seconds. Ratios are to the "
            f"`{comparisons.PIPELINE_BASELINE}` backend (pytorch/examples: PIL + ToTensor + Normalize, float) of "
            "the same sweep, cache state and worker count. With workers > 0 the per-core figure includes "
            "starting the workers and moving batches through their pipes. What limits the next gain: the "
            "`fast` backend already decodes only the crop (libjpeg-turbo's region decoding; a reduced DCT "
            "scale where the crop allows), but libjpeg must still entropy-decode every row above the crop, "
            "and entropy decoding (which neither can reduce) is most of a JPEG decode (see "
            "`imagenet/data/decode/jpeg.py`). At 224 px on 500x375 images no crop is twice the output size, so "
            "DCT scaling never applies there; the next gains are decoding off the CPU (nvJPEG/DALI) or a "
            "pre-processed dataset format. Records older than the region decoder decoded every row down "
            "to the crop (the commit in each record's env row tells them apart).\n\n"
            + md_table(["backend", "cache", "workers", "image size", "images", "bytes/image", "images/s",
                        "CPU ms/image", "images/s per core", "cores busy", "per-core ratio vs baseline",
                        "wall ratio vs baseline", "host load (1 min)", "env", "record"], table)
            + "\n### Steady state, backends in lockstep\n\nThe figures above include one-off costs (DataLoader "
            "and worker start-up, first calls), which short passes do not amortise. `python -m results.bench "
            "pipeline` measures the steady state instead: with 0 workers the backends take turns batch by "
            "batch on the same files, each timed by the thread's CPU clock, so busy moments of a shared "
            "machine fall on all alike; with workers, a first pass starts them and the second is measured "
            "(CPU of this process and the workers). Each round gives a ratio to the baseline; the median "
            "over rounds is shown with its range.\n\n" + steady_pipeline_table(steady, env))
