"""Validation and what an epoch's results look like: the top-1/top-5 pass over the validation set,
the epoch's TensorBoard scalars and its console line.

The loop (hpc_imagenet.imagenet.train.trainer) decides when to validate and which weights are scored; this module
measures them and words the result.
"""
from __future__ import annotations

import time

import torch

from hpc_imagenet.imagenet.train.metrics import EpochMeter


@torch.no_grad()
def validate(model: torch.nn.Module, parts, device: torch.device, max_steps: int = 0) -> dict:
    """Loss, top-1, top-5 and speed of MODEL over PARTS' validation loader (the first MAX_STEPS
    batches when MAX_STEPS is set), summed over every rank."""
    model.eval()
    meter, start = EpochMeter(device), time.perf_counter()
    for i, (images, target) in enumerate(parts.val_loader):
        if max_steps and i >= max_steps:
            break
        images = parts.precision.cast_input(parts.normalizer(images))
        target = target.to(device, non_blocking=True)
        with parts.precision.autocast():
            output = model(images)
        meter.update(parts.criterion(output.float(), target), output, target)
    stats = meter.global_()
    wall = time.perf_counter() - start
    return {"val_loss": stats["loss"], "val_top1": stats["top1"], "val_top5": stats["top5"],
            "val_images_per_s": stats["samples"] / wall if wall > 0 else None, "val_time_s": wall,
            "val_samples": stats["samples"]}


def epoch_scalars(row: dict) -> dict:
    """The TensorBoard scalars of one epoch's ROW (train, and val when it was validated)."""
    scalars = {"Loss/train": row["train_loss"], "Top1/train": row["train_top1"], "Top5/train": row["train_top5"],
               "Lr": row["lr"], "Throughput/train": row["train_images_per_s"], "Time/train": row["train_time_s"]}
    if "val_top1" in row:
        scalars.update({"Loss/val": row["val_loss"], "Top1/val": row["val_top1"], "Top5/val": row["val_top5"],
                        "Throughput/val": row["val_images_per_s"], "Time/val": row["val_time_s"]})
    return scalars


def epoch_line(epoch: int, row: dict, eval_every: int) -> str:
    """The console's line for one epoch's ROW."""
    if "val_top1" not in row:
        return (f" * Epoch {epoch}: train top1 {row['train_top1']:.2f}  loss {row['train_loss']:.4f}  "
                f"train {row['train_images_per_s']:.1f} img/s (validation every {eval_every} epochs)")
    scored = "  (ema)" if row["val_weights"] == "ema" else ""
    return (f" * Epoch {epoch}: val top1 {row['val_top1']:.2f}  top5 {row['val_top5']:.2f}  "
            f"loss {row['val_loss']:.4f}  ({row['val_samples']} images)  train "
            f"{row['train_images_per_s']:.1f} img/s{scored}")


def evaluation_line(row: dict) -> str:
    """The console's line for --evaluate's one pass."""
    return (f" * Evaluation: top1 {row['val_top1']:.2f}  top5 {row['val_top5']:.2f}  "
            f"loss {row['val_loss']:.4f}  ({row['val_samples']} images)")
