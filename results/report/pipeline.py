"""Report section: the data pipeline's backends against the baseline (per core and wall clock)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from results.analysis import comparisons
from results.core.kinds import Record
from results.report import figures
from results.report.common import Environments, md_table, prose


def steady_pipeline_table(steady: Sequence[Record], env: Environments) -> str:
    """The lockstep, steady-state records (``results.bench pipeline``): the per-core ratio that counts."""
    if not steady:
        return "_(no steady-state pipeline records yet: run `python -m results.bench pipeline`)_\n"
    rows = [[r.point.backend, _policy(r.point), r.point.split, r.point.workers, r.point.image_size,
             r.point.images, r.metrics.rounds, r.metrics.cpu_ms_per_image,
             r.metrics.images_per_cpu_s, r.metrics.images_per_s,
             comparisons.times(r.metrics.ratio_per_core),
             (f"{comparisons.times(r.metrics.ratio_min)}-{comparisons.times(r.metrics.ratio_max)}"
              if r.metrics.ratio_min else "-"), r.host_load_1m, env.id(r), r.source]
            for r in sorted(steady, key=lambda r: (r.sweep, r.point.auto_augment or "", r.point.split, r.point.workers,
                                                   r.point.backend))]
    return md_table("pipeline.steady_columns", rows)


def _policy(point) -> str:
    """The policy a point's images went through: the sweep's, on the training split only."""
    return point.auto_augment if point.auto_augment and point.split == "train" else "-"


def pipeline_section(io: Sequence[Record], steady: Sequence[Record], env: Environments, fig_dir: Path) -> str:
    rows = comparisons.pipeline_rows(io)
    cats, cell = figures.comparison_cells(rows, lambda r: f"{r.point.workers} workers, {r.point.cache}",
                                          lambda r: r.point.backend)
    backends = sorted({x["record"].point.backend for x in rows})

    def panel(metric: str, ylabel: str, title: str, ratio: Optional[str]) -> dict:
        return {"title": title, "ylabel": ylabel, "categories": cats,
                "bars": figures.ratio_bars(cell, cats, backends, metric, ratio),
                "empty": "no io records with CPU accounting (rerun `python -m results.bench io`)"}
    figures.bars(fig_dir / "pipeline_per_core.png", [
        panel("images_per_cpu_s", "images/s per core (images per CPU second)",
              "per core: labels = ratio to the baseline backend", "per_core_ratio"),
        panel("images_per_s", "images/s (wall clock, one reader)", "wall clock: labels = ratio to baseline",
              "wall_ratio"),
    ], "Data pipeline by backend: decode + train augmentation, one reader, same JPEGs")
    table = [[r.point.backend, r.point.cache, r.point.workers, r.point.image_size, r.metrics.images,
              r.metrics.bytes_per_image, r.metrics.images_per_s, r.metrics.cpu_ms_per_image, r.metrics.images_per_cpu_s,
              r.metrics.cores_busy, comparisons.times(x["per_core_ratio"]), comparisons.times(x["wall_ratio"]),
              r.host_load_1m, env.id(r), r.source] for x in rows for r in [x["record"]]]
    return prose("pipeline.section", baseline=comparisons.PIPELINE_BASELINE, steady=steady_pipeline_table(steady, env),
                 table=md_table("pipeline.columns", table))
