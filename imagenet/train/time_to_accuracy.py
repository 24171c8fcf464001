"""Time to accuracy, from a run's epoch rows: what run.json's ``time_to_accuracy`` holds.

MLPerf's measure: the time from the start of training until an evaluation first reaches the
target, with the evaluations counted in. Each epoch row of the engine carries ``elapsed_s``
(training and validation so far, summed over resumed attempts; set-up such as building the model
and scanning the data set is not in it), ``core_s`` (CPU seconds of every rank's process tree) and
``train_samples``; rows of epochs that validated also carry ``val_top1`` and ``val_time_s``, and
with ``--model-ema`` the same for the average (``val_top1_ema``, ``val_time_s_ema``).

With an EMA of the weights, an evaluation counts the better of the two top-1s: the averaged
weights are a model the run keeps (every checkpoint holds them), and torchvision reports its EMA
recipes by the average's accuracy in the same way. The block says which one reached the target.
"""
from __future__ import annotations

from typing import List, Optional, Sequence


def summary(history: Sequence[dict], desired_acc: Optional[float], eval_every: int, world_size: int,
            device_type: str) -> Optional[dict]:
    """The time-to-accuracy block for DESIRED_ACC (a fraction), or None without a target."""
    if desired_acc is None:
        return None
    target = 100.0 * desired_acc
    hit = next((i for i, row in enumerate(history) if (counted_top1(row) or -1.0) >= target), None)
    upto = list(history[: hit + 1]) if hit is not None else list(history)
    last = upto[-1] if upto else {}
    wall = last.get("elapsed_s")
    return {"target_top1": target, "reached": hit is not None,
            "wall_s": wall if hit is not None else None,
            "epochs": last.get("epoch", -1) + 1 if hit is not None else None,
            "images_seen": sum(row.get("train_samples", 0) for row in upto) if hit is not None else None,
            "core_s": last.get("core_s") if hit is not None else None,
            "device_hours": _device_hours(wall, world_size, device_type) if hit is not None else None,
            "reached_by": _source(history[hit]) if hit is not None else None,
            "eval_s": sum(row.get("val_time_s", 0.0) + row.get("val_time_s_ema", 0.0) for row in upto),
            "evaluations": sum("val_top1" in row for row in upto), "eval_every": eval_every,
            "curve": curve(history)}


def counted_top1(row: dict) -> Optional[float]:
    """The top-1 an epoch row's evaluation counts (see the module docstring); None without one."""
    if "val_top1" not in row:
        return None
    return max(row["val_top1"], row.get("val_top1_ema", row["val_top1"]))


def _source(row: dict) -> str:
    return "ema" if row.get("val_top1_ema", -1.0) > row["val_top1"] else "model"


def curve(history: Sequence[dict]) -> List[dict]:
    """Top-1 after each validation against the time so far (training and validation): the counted
    top-1, and the EMA's beside it where there is one."""
    return [{"epoch": row["epoch"] + 1, "elapsed_s": row.get("elapsed_s"), "top1": counted_top1(row),
             **({"top1_model": row["val_top1"], "top1_ema": row["val_top1_ema"]} if "val_top1_ema" in row else {})}
            for row in history if "val_top1" in row]


def _device_hours(wall_s: Optional[float], world_size: int, device_type: str) -> Optional[float]:
    """GPU hours (wall x processes, one GPU each); None on CPUs, where core-seconds say the cost."""
    if wall_s is None or device_type != "cuda":
        return None
    return wall_s * world_size / 3600.0
