"""Report sections: the training step against the baseline (CPU and GPU), and the first GPU targets."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hpc_imagenet.harness.analysis import comparisons
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.setups import SETUPS
from hpc_imagenet.harness.report import figures, gpu_step
from hpc_imagenet.harness.report.common import Environments, data_label, md_table, pct, prose


COLUMNS = ("setup", "data", "model", "image size", "batch/proc", "processes", "ms/step", "data ms/step",
           "compute ms/step", "images/s", "speed-up vs baseline (ms/step)", "images/s vs baseline", "measured steps",
           "host load (1 min)", "env", "record")


def step_section(train: Sequence[Record], env: Environments, fig_dir: Path, gpu: bool = False) -> str:
    rows = [x for x in comparisons.step_rows(train) if x["record"].on_gpu == gpu]
    if gpu and not rows:
        return prose("steps.no_gpu") + "\n"

    def cat(record: Record) -> str:
        p = record.point
        return f"{data_label(p.data)}, {p.arch} {p.image_size}px\nb{p.batch_size}, {p.world_size} proc"
    cats, cell = figures.comparison_cells(rows, cat, lambda r: r.point.setup)
    setups = list(dict.fromkeys(x["record"].point.setup for x in rows))
    empty = "no --setups train records (rerun `make bench`)"
    figure = "step_time_gpu.png" if gpu else "step_time.png"
    figures.bars(fig_dir / figure, [
        {"title": "ms per training step (lower is better); labels: baseline ms / ms", "ylabel": "ms/step",
         "categories": cats, "bars": figures.ratio_bars(cell, cats, setups, "step_time_ms", "step_speedup"),
         "empty": empty},
        {"title": "training throughput; labels: ratio to baseline", "ylabel": "images/s", "categories": cats,
         "bars": figures.ratio_bars(cell, cats, setups, "images_per_s", "throughput_ratio"), "empty": empty},
    ], "Training step: pytorch/examples-style baseline vs the engine, same batch and data, "
       + ("on one GPU" if gpu else "on this CPU"))
    about = "".join(f"- `{k}`: {v.about} (`{v.variant}`, {v.precision}"
                    f"{', ' + v.amp_dtype if v.amp_dtype else ''}{', ' + ' '.join(v.flags) if v.flags else ''})\n"
                    for k, v in SETUPS.items() if k in setups)
    table = [[r.point.setup, data_label(r.point.data), r.point.arch, r.point.image_size, r.point.batch_size,
              r.metrics.world_size, r.metrics.step_time_ms, r.metrics.data_time_ms, r.metrics.compute_time_ms,
              r.metrics.images_per_s, comparisons.times(x["step_speedup"]), comparisons.times(x["throughput_ratio"]),
              r.metrics.measured_steps, r.host_load_1m, env.id(r), r.source] for x in rows for r in [x["record"]]]
    return prose("steps.section", title="GPU training step" if gpu else "Training step", figure=figure, about=about,
                 where=prose(f"steps.where_{'gpu' if gpu else 'cpu'}"), targets=gpu_targets(train) if gpu else "",
                 table=md_table(COLUMNS, table))


# The first targets for one H100: ResNet-50 AMP on synthetic data against the fp32 NCHW baseline at the
# same batch, and the real-JPEG pipeline against the same setup on synthetic data.
TARGET_SPEEDUP, TARGET_IMAGES_PER_S, TARGET_JPEG_FRACTION = 3.0, 5000.0, 0.90


TARGETS_COLUMNS = ("setup", "model", "GPU", "images/s", "vs baseline", ">= {speedup:g}x", ">= {rate:g} images/s",
                   "record")
JPEG_COLUMNS = ("setup", "data", "loader workers", "JPEG images/s", "synthetic images/s", "fraction", ">= {fraction}",
                "records")


def gpu_targets(train: Sequence[Record]) -> str:
    steps = [x for x in gpu_step.amp_synthetic(train) if x["throughput_ratio"]]
    rows = [[r.point.setup, r.point.arch, r.environment.gpu_name, r.metrics.images_per_s,
             comparisons.times(x["throughput_ratio"]), x["throughput_ratio"] >= TARGET_SPEEDUP,
             r.metrics.images_per_s >= TARGET_IMAGES_PER_S, r.source] for x in steps for r in [x["record"]]]
    jpeg = [x for x in comparisons.jpeg_vs_synthetic_rows(train) if x["record"].on_gpu]
    jrows = [[r.point.setup, data_label(r.point.data), r.point.workers, r.metrics.images_per_s,
              x["synthetic"].metrics.images_per_s, pct(x["fraction"]), x["fraction"] >= TARGET_JPEG_FRACTION,
              f"{r.source} vs {x['synthetic'].source}"] for x in jpeg for r in [x["record"]]]
    values = {"speedup": TARGET_SPEEDUP, "rate": TARGET_IMAGES_PER_S, "fraction": pct(TARGET_JPEG_FRACTION)}
    return prose("steps.targets", **values, table=md_table(TARGETS_COLUMNS, rows, **values),
                 jpeg=md_table(JPEG_COLUMNS, jrows, **values))
