"""Predicted time to a target top-1: the scaling model's images/s times the epochs a published recipe needs.

    time(n) = E(B) x images / x(n)  +  evals x val images / x_eval(n)

with x(n) the whole-step model's images/s on n GPUs (``studies.published_model.formulas``), B = n b the
global batch, E(B) the epochs a recipe needed at that batch in its published logs
(``studies/published_model/reference/epochs_to_accuracy.json``), and the evaluation passes counted in where the
source's time counts them. An evaluation image costs the forward pass only, (1 - f) t_c / b on one GPU
(f: the model's backward share), with no all-reduce; each GPU evaluates its share.

Between two published batch sizes E(B) is interpolated linearly in log B; below the smallest the
smallest's epochs hold (no published log shows a smaller batch needing more); above the largest
there is no prediction. A recipe that trains at lower resolution (FFCV: 160-192 px) scales the
compute per image by its pixels, (r / 224)^2, averaged over its epochs.

:func:`check_rows` sets the prediction beside published time-to-train results that the model was not
fitted to; a point whose hardware has no throughput input is listed with the measurement that would
give it one. Pure arithmetic: the printing is ``python -m studies.published_model --check-time-to-accuracy``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES
from studies.published_model import formulas as scaling_model

MLPERF_TARGET_TOP1 = 75.9
REFERENCE_RESOLUTION = 224  # the resolution every throughput input was measured at


@dataclass(frozen=True)
class EpochsRow:
    """A recipe's published epochs to its target at one global batch."""

    global_batch: int
    epochs: float


def recipe_rows(recipe: dict) -> List[EpochsRow]:
    """The rows of a recipe in ``epochs_to_accuracy.json`` that give a global batch, by batch."""
    return sorted((EpochsRow(r["global_batch"], r["epochs"]) for r in recipe["rows"] if "global_batch" in r),
                  key=lambda row: row.global_batch)


def epochs_at(rows: Sequence[EpochsRow], global_batch: float) -> Optional[float]:
    """Epochs the recipe needs at ``global_batch`` (see the module docstring); None above its largest row."""
    if not rows:
        raise ValueError("a recipe without rows has no epochs")
    if global_batch <= rows[0].global_batch:
        return float(rows[0].epochs)
    for lo, hi in zip(rows, rows[1:]):
        if global_batch <= hi.global_batch:
            share = math.log(global_batch / lo.global_batch) / math.log(hi.global_batch / lo.global_batch)
            return lo.epochs + share * (hi.epochs - lo.epochs)
    return None


def evaluations(epochs: float, eval_every: int) -> int:
    """Evaluation passes up to and including the one that finds the target (every ``eval_every`` epochs)."""
    return math.ceil(epochs / eval_every)


def scheduled_resolution(epoch: int, min_res: int, max_res: int, start_ramp: int, end_ramp: int) -> int:
    """FFCV's progressive resizing: min_res until start_ramp, max_res from end_ramp, between them linear in
    the epoch and rounded to a multiple of 32."""
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    res = min_res + (max_res - min_res) * (epoch - start_ramp) / (end_ramp - start_ramp)
    return int(round(res / 32)) * 32


def pixel_factor(resolution: float) -> float:
    """Compute per image at ``resolution`` over the same at the reference 224 px (convolutions scale with pixels)."""
    return (resolution / REFERENCE_RESOLUTION) ** 2


def mean_pixel_factor(epochs: int, min_res: int, max_res: int, start_ramp: int, end_ramp: int) -> float:
    """The pixel factor averaged over a progressive-resizing schedule's epochs."""
    return sum(pixel_factor(scheduled_resolution(e, min_res, max_res, start_ramp, end_ramp))
               for e in range(epochs)) / epochs


def at_pixels(model: scaling_model.WholeStep, factor: float) -> scaling_model.WholeStep:
    """The same cluster training at another resolution: compute per step times ``factor``."""
    return replace(model, inputs=replace(model.inputs, step_time_s=model.inputs.step_time_s * factor))


def eval_images_per_s(model: scaling_model.WholeStep, gpus: int, factor: float = 1.0) -> float:
    """Validation images/s on ``gpus`` GPUs: the forward share (1 - f) of the compute, no all-reduce."""
    m = model.inputs
    return gpus * m.batch_per_gpu / ((1.0 - m.backward_fraction) * m.step_time_s * factor)


def time_to_accuracy(images_per_s: float, epochs: float, evals: int = 0, eval_per_s: Optional[float] = None,
                     train_images: int = IMAGENET_TRAIN_IMAGES,
                     val_images: int = IMAGENET_VAL_IMAGES) -> Dict[str, float]:
    """Seconds of training, of evaluation, and both, for ``epochs`` epochs at ``images_per_s``."""
    if evals and not eval_per_s:
        raise ValueError("evaluation passes need an evaluation rate")
    train_s = epochs * train_images / images_per_s
    eval_s = evals * val_images / eval_per_s if evals else 0.0
    return {"train_s": train_s, "eval_s": eval_s, "total_s": train_s + eval_s}


def predict_series(model: scaling_model.WholeStep, gpus: Sequence[int], rows: Sequence[EpochsRow],
                   eval_every: int) -> List[Dict[str, object]]:
    """Predicted time to the recipe's target at each GPU count, the global batch n b deciding the epochs."""
    out = []
    for n in gpus:
        batch = n * model.inputs.batch_per_gpu
        x = scaling_model.breakdown(model, n)["images_per_s"]
        epochs = epochs_at(rows, batch)
        row: Dict[str, object] = {"gpus": n, "global_batch": batch, "images_per_s": x, "epochs": epochs}
        if epochs is not None:
            evals = evaluations(epochs, eval_every)
            row.update(evals=evals, **time_to_accuracy(x, epochs, evals, eval_images_per_s(model, n)))
        out.append(row)
    return out


# ---------------------------------------------------------------- the check against published times

@dataclass(frozen=True)
class Throughput:
    """Where a published point's images/s comes from: a calibrated model, or the measurement it lacks."""

    model: Optional[scaling_model.WholeStep]
    source: str  # which case or record the model is
    missing: str = ""  # the measurement that would give a model, or decide a miss


def h100_model(train: Sequence[Record], system: dict,
               grad_bytes: float) -> Tuple[Optional[scaling_model.WholeStep], str]:
    """A one-H100 ResNet-50 224 px train record (the best images/s), on the cited DGX H100 link; None without one."""
    ok = [r for r in train if r.ok and "H100" in str(r.environment.gpu_name) and r.metrics.world_size == 1
          and r.point.arch == "resnet50" and r.point.image_size == REFERENCE_RESOLUTION and not r.profiled]
    if not ok:
        return None, ""
    best = max(ok, key=lambda r: r.metrics.images_per_s)
    b = best.point.batch_size
    inputs = scaling_model.ModelInputs(step_time_s=b / best.metrics.images_per_s, batch_per_gpu=b,
                                       grad_bytes=grad_bytes, busbw_intra=system["busbw_intra"],
                                       alpha_intra_s=system["alpha_intra_s"], gpus_per_node=system["gpus_per_node"])
    return (scaling_model.WholeStep(inputs),
            f"{best.source} (this project's engine, {best.point.data} data, batch {b})")


def ffcv_factors(recipe: dict, epochs: int) -> Tuple[float, float]:
    """(mean train pixel factor over the schedule of ``epochs``, validation factor) of an FFCV config; the
    validation factor counts its forward passes per image (2 with flip test-time augmentation)."""
    row = next(r for r in recipe["rows"] if r["epochs"] == epochs)
    train = mean_pixel_factor(epochs, recipe["min_res"], recipe["max_res"], row["start_ramp"], row["end_ramp"])
    return train, pixel_factor(recipe["val_res"]) * recipe.get("eval_forward_passes", 1)


def point_row(point: dict, source: Throughput, train_factor: float = 1.0, eval_factor: float = 1.0,
              published_rate: Optional[float] = None,
              tolerance: float = scaling_model.CHECK_TOLERANCE) -> Dict[str, object]:
    """One published time-to-train point beside its prediction, every term kept; ``published_rate``: the
    source's own images/s for that point, whose time (same epochs and evaluations) shows what the
    published time holds beyond the training steps."""
    published = sum(point["published_s"]) / len(point["published_s"])
    row: Dict[str, object] = {"name": point["name"], "hardware": point["hardware"], "gpus": point["gpus"],
                              "global_batch": point["global_batch"], "epochs": point["epochs"],
                              "evals": point["evals"] if point.get("counts_eval") else 0, "published_s": published,
                              "throughput_source": source.source, "missing": source.missing,
                              "train_factor": train_factor, "eval_factor": eval_factor}
    if source.model is None:
        return row
    n, b = point["gpus"], point["global_batch"] // point["gpus"]
    model = scaling_model.with_batch(source.model, b)
    p = scaling_model.breakdown(at_pixels(model, train_factor), n)
    eval_rate = eval_images_per_s(model, n, eval_factor)
    t = time_to_accuracy(p["images_per_s"], point["epochs"], row["evals"], eval_rate)
    half_rounding = point.get("rounded_to_s", 0) / 2
    error = scaling_model.relative_error(t["total_s"], published)
    row.update(images_per_s=p["images_per_s"], binding=p["binding"], eval_images_per_s=eval_rate, error=error,
               within=abs(error) <= tolerance or abs(t["total_s"] - published) <= half_rounding, **t)
    if published_rate:
        row["at_published_rate_s"] = time_to_accuracy(published_rate, point["epochs"], row["evals"],
                                                      eval_rate)["total_s"]
    return row


def check_rows(ref: dict, cases: Dict[str, scaling_model.WholeStep],
               h100: Tuple[Optional[scaling_model.WholeStep], str],
               dle_rates: Optional[Dict[str, Dict[str, float]]] = None) -> List[Dict[str, object]]:
    """Every published time-to-train point of ``epochs_to_accuracy.json`` with its prediction.

    ``cases``: the throughput check's calibrated models by name (``NVIDIA DLE <config>``); DLE's points use
    their own config's, FFCV's the A100 AMP one at FFCV's resolutions with the input pipeline left out
    (FFCV's own loader, not the PIL one the case measured). ``h100``: the model from a one-H100 record
    (``h100_model``) with its source; MLPerf's multi-node point has no inter-node link input.
    ``dle_rates``: DLE's published images/s by config and GPU count (``published_resnet50.json``).
    """
    recipes, rows = ref["recipes"], []
    for point in ref["time_to_train"]:
        group = point["source_group"]
        if group == "dle_rn50":
            name = f"NVIDIA DLE {point['dle_config']}"
            rate = (dle_rates or {}).get(point["dle_config"], {}).get(str(point["gpus"]))
            rows.append(point_row(point, Throughput(cases.get(name), name, ref["missing"]["dle"]),
                                  published_rate=rate))
        elif group == "ffcv_rn50":
            base = cases.get("NVIDIA DLE A100_80GB_AMP")
            model = replace(base, off=base.off + ("input pipeline",)) if base else None
            train_f, eval_f = ffcv_factors(recipes["ffcv_rn50"], point["epochs"])
            rows.append(point_row(point, Throughput(model, "NVIDIA DLE A100_80GB_AMP, input pipeline left out",
                                                    ref["missing"]["ffcv"]), train_f, eval_f))
        elif group == "mlperf" and point["nodes"] > 1:
            rows.append(point_row(point, Throughput(None, "-", ref["missing"]["mlperf_multinode"])))
        elif group == "mlperf":
            model, src = h100
            missing = ref["missing"]["h100_engine" if model else "h100_no_record"]
            rows.append(point_row(point, Throughput(model, src or "-", missing)))
    return rows


def failures(rows: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Predicted points off by more than the tolerance and outside the published rounding (the check exits 1
    when there are any)."""
    return [r for r in rows if "error" in r and not r["within"]]
