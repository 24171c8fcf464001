"""A per-cluster report's time to accuracy: predicted to 75.9 % top-1 vs GPUs, and measured where recorded.

The prediction takes the tag's calibrated scaling model (``results.analysis.cluster_model``) at each GPU
count and the epochs MLPerf's ResNet-50 logs needed at that global batch
(``results/reference/epochs_to_accuracy.json``); ``results.analysis.time_to_accuracy`` does the arithmetic.
It predicts only where the cited recipe reaches its target: the recipe's architecture at its image
size, and a global batch within the published runs' range; elsewhere the section says why not.
The measured section reads records of kind ``time_to_accuracy`` through :func:`from_record` into a small
:class:`TimeToAccuracy`, so the section depends only on the fields it shows.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, TypedDict

from results.analysis import time_to_accuracy
from results.analysis.cluster_model import Prediction
from results.report import figures
from results.core.kinds import Record
from results.core.setups import IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES
from results.report.common import REFERENCE, fmt, gpu_axis, md_table, prose, sorted_groups

FIGURE = "time_to_accuracy.png"


class TimeToAccuracy(TypedDict):
    """What the measured section shows of one time_to_accuracy record."""

    series: str  # program and model, as a reader names the run
    gpus: int  # GPUs, or processes on a CPU
    target_top1: float  # %
    time_to_target_s: Optional[float]  # None: the target was not reached
    epochs_to_target: Optional[float]
    images_seen: Optional[int]
    best_top1: float
    wall_s: float
    source: str  # the record


def from_record(record: Record) -> TimeToAccuracy:
    p, m = record.point, record.metrics
    return TimeToAccuracy(
        series=" ".join(str(v) for v in (p.program or p.setup or p.variant, p.arch) if v),
        gpus=int(m.world_size or p.gpus or p.processes or 1),
        target_top1=m.target_top1, time_to_target_s=m.time_to_target_s, epochs_to_target=m.epochs_to_target,
        images_seen=m.images_seen, best_top1=m.best_top1, wall_s=m.wall_s, source=record.source)


def reference(ref_dir: Path = REFERENCE) -> dict:
    return json.loads((ref_dir / "epochs_to_accuracy.json").read_text())


def _hours(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 3600


def predicted_section(pred: Prediction, hw: str, fig_dir: Path, ref: Optional[dict] = None) -> str:
    """Predicted time to 75.9 % top-1 at each GPU count of the tag's scaling model (its figure and table),
    or why there is none."""
    ref = ref or reference()
    recipe = ref["recipes"]["mlperf"]
    heading = f"## Predicted time to {time_to_accuracy.MLPERF_TARGET_TOP1} % top-1\n\n"
    p = pred.calibration.point
    if (p.arch, p.image_size) != (recipe["arch"], recipe["image_size"]):  # its epochs say nothing of this model
        return heading + prose("predicted_tta.not_predictable", p=p, recipe=recipe) + "\n"
    epochs = time_to_accuracy.recipe_rows(recipe)
    low, high = epochs[0].global_batch, epochs[-1].global_batch  # the published runs' range (rows by batch)
    gpus = [row["gpus"] for row in pred.rows]
    series = time_to_accuracy.predict_series(pred.whole, gpus, epochs, recipe["eval_every"])
    rows = [row if low <= row["global_batch"] <= high else {**row, "epochs": None} for row in series]
    drawn = [r for r in rows if r["epochs"] is not None]
    if drawn:
        figures.report_panels(fig_dir / FIGURE, [{
            "title": hw, "xlabel": gpu_axis(hw),
            "ylabel": f"predicted time to {time_to_accuracy.MLPERF_TARGET_TOP1} % top-1 (hours)",
            "xlog": True, "ymin0": True, "series": [
                {"label": "scaling model x MLPerf epochs", "x": [r["gpus"] for r in drawn],
                 "y": [r["total_s"] / 3600 for r in drawn], "style": "o--", "color": figures.palette(1),
                 "labels": [f"{r['epochs']:.0f} ep" for r in drawn]}]}],
            f"Predicted time to {time_to_accuracy.MLPERF_TARGET_TOP1} % top-1 (labels: epochs at that global batch)")
    table = [[r["gpus"], r["global_batch"], r["images_per_s"], "-" if r["epochs"] is None else f"{r['epochs']:.1f}",
              r.get("evals"), _hours(r.get("train_s")), _hours(r.get("eval_s")), _hours(r.get("total_s"))]
             for r in rows]
    published = ", ".join(f"{row['global_batch']:,}: {row['epochs']}" for row in recipe["rows"])
    return heading + (f"![predicted time to accuracy]({FIGURE})\n\n" if drawn else "") + prose(
        "predicted_tta.predicted", target=time_to_accuracy.MLPERF_TARGET_TOP1, batch=pred.whole.inputs.batch_per_gpu,
        images=IMAGENET_TRAIN_IMAGES, val=IMAGENET_VAL_IMAGES, every=recipe["eval_every"], published=published, low=low,
        high=high, table=md_table("predicted_tta.predicted_columns", table, target=time_to_accuracy.MLPERF_TARGET_TOP1))


def _series(items: Sequence[TimeToAccuracy]) -> Dict[Tuple[str, float], List[TimeToAccuracy]]:
    return sorted_groups(items, lambda t: (t["series"], t["target_top1"]), lambda t: (t["gpus"], t["source"]))


def measured_section(items: Sequence[TimeToAccuracy]) -> str:
    """"Time to X % top-1 vs GPUs" from the tag's time_to_accuracy records; empty without any."""
    if not items:
        return ""
    targets = sorted({t["target_top1"] for t in items})
    title = f"{fmt(targets[0])} %" if len(targets) == 1 else "the target"
    rows = [[name, t["gpus"], target, "not reached" if t["time_to_target_s"] is None else fmt(t["time_to_target_s"]),
             t["epochs_to_target"], t["images_seen"], t["best_top1"], t["wall_s"], t["source"]]
            for (name, target), ts in _series(items).items() for t in ts]
    return prose("predicted_tta.measured", title=title, table=md_table("predicted_tta.measured_columns", rows))
