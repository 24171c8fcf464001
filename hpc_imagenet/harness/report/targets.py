"""RESULTS.md's first screen: each target, the best measured value, met or not, and its record.

The goals are the ones the report sections check in detail (their constants live there); this
module only picks, for each, the best record and says whether it meets the goal.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from hpc_imagenet.harness.analysis import comparisons
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind, newest_sweep
from hpc_imagenet.harness.report import data_scale, gpu_step, steps
from hpc_imagenet.harness.report.common import fmt, md_table, pct, prose


def _row(target: str, goal: str, value: Optional[str], met: Optional[bool], record: Optional[str]) -> List[str]:
    return [target, goal, value or "not measured", "-" if met is None else ("**yes**" if met else "no"), record or "-"]


def _gpu_name(row: dict) -> str:
    return row["record"].environment.gpu_name or "GPU"


def _gpu_rows(train: Sequence[Record]) -> List[List[str]]:
    """The step targets for each GPU model apart: a goal met on one model says nothing of another."""
    amp = [x for x in gpu_step.amp_synthetic(train) if x["record"].point.arch == "resnet50"]
    return [row for gpu in sorted({_gpu_name(x) for x in amp})
            for row in _one_gpu_rows(gpu, [x for x in amp if _gpu_name(x) == gpu])]


def _one_gpu_rows(gpu: str, amp: Sequence[dict]) -> List[List[str]]:
    fastest = max(amp, key=lambda x: x["record"].metrics.images_per_s)
    rated = [x for x in amp if x["throughput_ratio"]]
    best_ratio = max(rated, key=lambda x: x["throughput_ratio"], default=None)
    both = [x for x in rated if x["throughput_ratio"] >= steps.TARGET_SPEEDUP
            and x["record"].metrics.images_per_s >= steps.TARGET_IMAGES_PER_S]
    rate = fastest["record"].metrics.images_per_s
    rows = [_row(f"ResNet-50 AMP training on one {gpu}, synthetic data",
                 f">= {gpu_step.TARGET_IMAGES_PER_S:g} images/s",
                 f"{fmt(rate)} images/s ({fastest['record'].point.setup}, batch "
                 f"{fastest['record'].point.batch_size})", rate >= gpu_step.TARGET_IMAGES_PER_S,
                 fastest["record"].source)]
    if best_ratio:
        r = best_ratio["throughput_ratio"]
        rows.append(_row(f"... on the {gpu}, against the plain fp32 loop of the same sweep",
                         f">= {gpu_step.TARGET_SPEEDUP:g}x",
                         f"{comparisons.times(r)} ({best_ratio['record'].point.setup})",
                         r >= gpu_step.TARGET_SPEEDUP,
                         best_ratio["record"].source))
    if rated:
        x = max(both or rated, key=lambda x: x["record"].metrics.images_per_s)
        rows.append(_row(f"... on the {gpu}, first goal: both at once", f">= {steps.TARGET_IMAGES_PER_S:g} images/s "
                         f"and >= {steps.TARGET_SPEEDUP:g}x", f"{fmt(x['record'].metrics.images_per_s)} "
                         f"images/s at {comparisons.times(x['throughput_ratio'])}", bool(both),
                         x["record"].source))
    return rows


def _jpeg_rows(train: Sequence[Record]) -> List[List[str]]:
    rows, measured = [], gpu_step.jpeg_rows(train)
    if not any(x["record"] for x in measured):
        return rows
    for setup, workers, label in gpu_step.JPEG_TARGETS:
        mine = [x for x in measured if x["setup"] == setup and x["fraction"]]
        best = max(mine, key=lambda x: x["fraction"], default=None)
        rows.append(_row(f"Real JPEGs through the {label} loader ({workers} workers) vs synthetic data, one GPU",
                         f">= {pct(gpu_step.TARGET_JPEG_FRACTION)} of synthetic",
                         pct(best["fraction"]) if best else None,
                         best["fraction"] >= gpu_step.TARGET_JPEG_FRACTION if best else None,
                         best["record"].source if best else None))
    return rows


def _pipeline_rows(recs: Sequence[Record]) -> List[List[str]]:
    newest = newest_sweep(data_scale.shards_pipeline(recs))
    rows = []
    for variant, goal in data_scale.TARGETS.items():
        mine = [r for r in newest if r.point.variant == variant and r.point.split == "train"]
        if not mine:
            continue
        worst = min(mine, key=lambda r: r.metrics.ratio_per_core)  # the goal holds at every worker count
        ratio = worst.metrics.ratio_per_core
        what = "original-byte shards" if variant == "fast+shards" else "shards re-encoded to 320 px"
        rows.append(_row(f"Data pipeline images/s per CPU core, {what} vs the pytorch/examples loader",
                         f">= {goal:g}x", f"{comparisons.times(ratio)} (lowest of workers "
                         + "/".join(str(r.point.workers) for r in mine) + ")", ratio >= goal, worst.source))
    return rows


def _opens_rows(recs: Sequence[Record]) -> List[List[str]]:
    by = {r.point.source: r for r in newest_sweep(by_kind(recs, "data_opens"))}
    folder, shards = by.get("folder"), by.get("shards")
    if not (folder and shards and shards.metrics.opens and folder.metrics.opens):
        return []
    fewer = folder.metrics.opens / shards.metrics.opens
    return [_row("Files opened per epoch and node, shards vs a folder of images",
                 f">= {data_scale.TARGET_FEWER:,}x fewer", f"{fewer:.0f}x fewer ({folder.metrics.opens} vs "
                 f"{shards.metrics.opens} over {shards.metrics.epochs or 1} epochs)",
                 fewer >= data_scale.TARGET_FEWER, f"{folder.source}, {shards.source}")]


COLUMNS = ("target", "goal", "best measured", "met", "record")


def section(recs: Sequence[Record], train: Sequence[Record]) -> str:
    rows = _gpu_rows(train) + _jpeg_rows(train) + _pipeline_rows(recs) + _opens_rows(recs)
    return prose("targets.section", table=md_table(COLUMNS, rows))
