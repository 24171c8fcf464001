"""Time to accuracy, from a run's epoch rows: what run.json's ``time_to_accuracy`` holds.

MLPerf's measure: the time from the start of training until an evaluation first reaches the
target, with the evaluations counted in. Each epoch row of the engine carries ``elapsed_s``
(training and validation so far, summed over resumed attempts; set-up such as building the model
and scanning the data set is not in it), ``core_s`` (CPU seconds of every rank's process tree) and
``train_samples``; rows of epochs that validated also carry ``val_top1``, ``val_time_s`` and
``val_weights``.

A run is scored on one declared set of weights (``--eval-weights``: the model, or with
``--model-ema`` the average of the weights), the same at every evaluation: taking the better of the
two at each evaluation would be a second chance at every point. A curve whose weights change is
refused (:func:`declared_weights`).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

# printed once a run, after its first training step: where a log shows that start-up is over
FIRST_STEP_LINE = "=> first training step done"


def summary(history: Sequence[dict], desired_acc: Optional[float], eval_every: int, world_size: int,
            device_type: str) -> Optional[dict]:
    """The time-to-accuracy block for DESIRED_ACC (a fraction), or None without a target."""
    if desired_acc is None:
        return None
    target = 100.0 * desired_acc
    hit = next((i for i, row in enumerate(history) if row.get("val_top1", -1.0) >= target), None)
    upto = list(history[: hit + 1]) if hit is not None else list(history)
    last = upto[-1] if upto else {}
    wall = last.get("elapsed_s")
    return {"target_top1": target, "reached": hit is not None,
            "wall_s": wall if hit is not None else None,
            "epochs": last.get("epoch", -1) + 1 if hit is not None else None,
            "images_seen": sum(row.get("train_samples", 0) for row in upto) if hit is not None else None,
            "core_s": last.get("core_s") if hit is not None else None,
            "device_hours": _device_hours(wall, world_size, device_type) if hit is not None else None,
            "weights": declared_weights(history),
            "eval_s": sum(row.get("val_time_s", 0.0) for row in upto),
            "evaluations": sum("val_top1" in row for row in upto), "eval_every": eval_every,
            "curve": curve(history)}


def declared_weights(history: Sequence[dict]) -> Optional[str]:
    """The weights every evaluation of HISTORY scored (model or ema); ValueError if they differ."""
    weights = {row.get("val_weights", "model") for row in history if "val_top1" in row}
    if len(weights) > 1:
        raise ValueError(f"the evaluations scored different weights ({', '.join(sorted(weights))}): a run is scored "
                         "on one declared set (--eval-weights)")
    return weights.pop() if weights else None


def curve(history: Sequence[dict]) -> List[dict]:
    """Top-1 after each validation against the time so far (training and validation)."""
    declared_weights(history)
    return [{"epoch": row["epoch"] + 1, "elapsed_s": row.get("elapsed_s"), "top1": row["val_top1"],
             "weights": row.get("val_weights", "model")} for row in history if "val_top1" in row]


def _device_hours(wall_s: Optional[float], world_size: int, device_type: str) -> Optional[float]:
    """GPU hours (wall x processes, one GPU each); None on CPUs, where core-seconds say the cost."""
    if wall_s is None or device_type != "cuda":
        return None
    return wall_s * world_size / 3600.0
