"""One cluster's time to accuracy: predicted to 75.9 % top-1 vs GPUs.

The prediction takes the tag's calibrated scaling model (``studies.published_model.cluster_model``) at each GPU
count and the epochs MLPerf's ResNet-50 logs needed at that global batch
(``studies/published_model/reference/epochs_to_accuracy.json``); ``studies.published_model.time_to_train`` does
the arithmetic.
It predicts only where the cited recipe reaches its target: the recipe's architecture at its image
size, and a global batch within the published runs' range; elsewhere the section says why not.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import gpu_axis, md_table
from studies.published_model import REFERENCE, words
from studies.published_model import time_to_train as time_to_accuracy
from studies.published_model.cluster_model import Prediction

FIGURE = "time_to_accuracy.png"


def reference(ref_dir: Path = REFERENCE) -> dict:
    return json.loads((ref_dir / "epochs_to_accuracy.json").read_text())


def _hours(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 3600


PREDICTED_COLUMNS = ("GPUs", "global batch", "predicted images/s", "epochs", "evaluations", "training (h)",
                     "evaluation (h)", "time to {target} % (h)")


def predicted_section(pred: Prediction, hw: str, fig_dir: Path, ref: Optional[dict] = None,
                      figure: str = FIGURE) -> str:
    """Predicted time to 75.9 % top-1 at each GPU count of the tag's scaling model (its figure and table),
    or why there is none."""
    ref = ref or reference()
    recipe = ref["recipes"]["mlperf"]
    heading = f"## Predicted time to {time_to_accuracy.MLPERF_TARGET_TOP1} % top-1\n\n"
    p = pred.calibration.point
    if (p.arch, p.image_size) != (recipe["arch"], recipe["image_size"]):  # its epochs say nothing of this model
        return heading + words("predicted_tta.not_predictable", p=p, recipe=recipe) + "\n"
    epochs = time_to_accuracy.recipe_rows(recipe)
    low, high = epochs[0].global_batch, epochs[-1].global_batch  # the published runs' range (rows by batch)
    gpus = [row["gpus"] for row in pred.rows]
    series = time_to_accuracy.predict_series(pred.whole, gpus, epochs, recipe["eval_every"])
    rows = [row if low <= row["global_batch"] <= high else {**row, "epochs": None} for row in series]
    drawn = [r for r in rows if r["epochs"] is not None]
    if drawn:
        figures.report_panels(fig_dir / figure, [{
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
    return heading + (f"![predicted time to accuracy](figures/{figure})\n\n" if drawn else "") + words(
        "predicted_tta.predicted", target=time_to_accuracy.MLPERF_TARGET_TOP1, batch=pred.whole.inputs.batch_per_gpu,
        images=IMAGENET_TRAIN_IMAGES, val=IMAGENET_VAL_IMAGES, every=recipe["eval_every"], published=published, low=low,
        high=high, table=md_table(PREDICTED_COLUMNS, table, target=time_to_accuracy.MLPERF_TARGET_TOP1))
