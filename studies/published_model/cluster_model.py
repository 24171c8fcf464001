"""The scaling model's prediction for one cluster, from that cluster's records alone.

A per-cluster report (``python -m hpc_imagenet.harness.report --tag T``) asks what the model of
:mod:`studies.published_model.formulas` predicts for the series it measured, and which term binds.
The inputs come only from the same tag's records:

- compute t_c: calibrated on the series' smallest point (at most ``CALIBRATION_MAX_GPUS``);
- gradient bytes: the model's parameters x 4 bytes (2 under O2/O3's half-precision gradients);
- the all-reduce link: the fit of the tag's own ``allreduce`` records (alpha, bus bandwidth);
- the hidden fraction h: the tag's newest ``overlap`` record (0 without one);
- stragglers: the per-step times of the calibration record, when the engine kept them;
- storage: the best aggregate MB/s and files/s of the tag's ``storage`` records (a lower bound of
  what the storage can do), only for series that read files.

A term the tag has no measurement for is left out and named in ``missing``, so the prediction is
an upper bound in that term, never a guess.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.analysis.allreduce_fit import fit_alpha_beta, hop_latency
from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.analysis.spread import aggregate
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import group_by
from studies.published_model import formulas as scaling_model
from studies.published_model.whole_step import model_overlap


@dataclass(frozen=True)
class Prediction:
    """The calibrated model, its rows (one per GPU count) and what it leaves out."""

    whole: scaling_model.WholeStep
    calibration: dict  # the record t_c was calibrated on
    rows: List[Dict[str, object]]  # gpus, measured (mean or None), predicted, error, terms, binding
    missing: List[str]  # terms without a measurement under this tag
    sources: Dict[str, str]  # input -> record id(s)


def _link(ar: Sequence[Record]) -> Tuple[Optional[dict], List[dict]]:
    """The all-reduce fit of the largest world size the tag measured, and its records."""
    by_world = group_by(ar, lambda r: (r.sweep, r.metrics.world_size))
    for key in sorted(by_world, key=lambda k: (k[1], k[0]), reverse=True):
        fit = fit_alpha_beta([r.metrics for r in by_world[key]])
        if fit:
            return fit, by_world[key]
    return None, []


def _storage(series: Sequence[Record], storage: Sequence[Record]) -> Optional[Tuple[scaling_model.Storage, dict, dict]]:
    """Storage ceilings for a series that reads ImageFolder files: best MB/s and files/s measured."""
    if not storage or all(r.point.data == "dummy" for r in series):
        return None
    folder = [r for r in storage if r.point.format == "imagefolder"] or list(storage)
    by_mb = max(folder, key=lambda r: r.metrics.mb_per_s)
    by_files = max(folder, key=lambda r: r.metrics.files_per_s)
    st = scaling_model.Storage(bytes_per_image=by_mb.metrics.bytes_per_file,
                               read_bytes_per_s=by_mb.metrics.mb_per_s * 1e6, opens_per_s=by_files.metrics.files_per_s)
    return st, by_mb, by_files


def predict_cluster(series: Sequence[Record], ar: Sequence[Record] = (), overlap: Sequence[Record] = (),
                    storage: Sequence[Record] = ()) -> Tuple[Optional[Prediction], str]:
    """(prediction, "") for one series of ok train records, or (None, the reason it cannot be made)."""
    pts = aggregate(series, lambda r: r.metrics.world_size, lambda r: r.metrics.images_per_s)
    if not pts or pts[0].x > scaling_model.CALIBRATION_MAX_GPUS:
        return None, f"no point of at most {scaling_model.CALIBRATION_MAX_GPUS} GPUs to calibrate the compute time on"
    cal = pts[0].records[-1]
    p = cal.point
    params = cal.metrics.parameters or parameter_count(p.arch)
    if not params:
        return None, f"the parameter count of {p.arch} is unknown"
    missing, sources = ["input pipeline (loader cores x images/s per core are not recorded per node)"], {}
    fit, ar_recs = _link(ar)
    if fit:
        busbw, alpha = fit["busbw_bytes_per_s"], hop_latency(fit["alpha_s"], fit["world_size"])
        sources["all-reduce link"] = f"{ar_recs[0].source}..{ar_recs[-1].source.split(':')[-1]}"
        if (p.nodes or 1) > 1 or any((r.point.nodes or 1) > 1 for r in series):
            missing.append("the inter-node link (the all-reduce was measured on one host; its fit is used)")
    else:
        busbw, alpha = math.inf, 0.0
        missing.append("all-reduce (no allreduce records under this tag: communication is taken as free)")
    h, h_rec = model_overlap(overlap)
    if h_rec:
        sources["hidden fraction"] = h_rec.source
    inputs = scaling_model.ModelInputs(step_time_s=1.0, batch_per_gpu=p.batch_size,
                                       grad_bytes=params * (2 if p.precision in ("O2", "O3") else 4), busbw_intra=busbw,
                                       alpha_intra_s=alpha, gpus_per_node=p.procs_per_node or 1 << 30)
    samples = tuple(cal.metrics.step_times_ms or ())
    if not samples:
        missing.append("stragglers (the calibration record kept no per-step times)")
    got = _storage(series, storage)
    if got:
        sources["storage"] = f"{got[1].source} (MB/s), {got[2].source} (files/s)"
    whole = scaling_model.WholeStep(inputs, hidden_fraction=h, step_samples=samples, storage=got[0] if got else None)
    try:
        whole = scaling_model.calibrate_whole(whole, int(pts[0].x), pts[0].mean)
    except ValueError as e:
        return None, str(e)
    sources["compute"] = cal.source
    measured = {int(pt.x): pt for pt in pts}
    gpus = sorted(set(measured) | {2 * max(measured)})
    rows = []
    for n in gpus:
        b = scaling_model.breakdown(whole, n)
        pt = measured.get(n)
        rows.append({"gpus": n, "measured": pt.mean if pt else None, "predicted": b["images_per_s"],
                     "error": scaling_model.relative_error(b["images_per_s"], pt.mean) if pt else None,
                     "efficiency": b["efficiency"], "exposed_comm_ms": 1e3 * b["exposed_comm_s"],
                     "straggler_ms": 1e3 * b["straggler_s"], "binding": b["binding"]})
    return Prediction(whole, cal, rows, missing, sources), ""


TOLERANCE = 0.10  # a prediction within this share of the measured images/s agrees with it


@dataclass(frozen=True)
class Miss:
    """A measured GPU count where the model's images/s are off by more than TOLERANCE, as step times."""

    gpus: int
    error: float  # (predicted - measured) / measured
    measured_ms: float  # the measured step, from the measured images/s
    predicted_ms: float
    term: str  # the term that misses, in words


def misses(pred: Prediction) -> List[Miss]:
    """The measured rows the model misses by more than TOLERANCE, each with the term that misses: when
    the model is optimistic, a cost it has no term for (those left out, or cores shared on one host);
    when pessimistic, its largest communication or straggler term, else the calibrated compute."""
    optimistic = ("a cost with no term here: " + "; ".join(pred.missing) if pred.missing
                  else "a cost the model has no term for (processes sharing one host's cores, or data loading)")
    out = []
    for row in pred.rows:
        if row["error"] is None or abs(row["error"]) <= TOLERANCE:
            continue
        batch = pred.whole.inputs.global_batch(row["gpus"])
        name, value = max({"exposed all-reduce": row["exposed_comm_ms"], "straggler wait": row["straggler_ms"]}.items(),
                          key=lambda item: item[1])
        pessimistic = (f"its {name} term ({value:.1f} ms a step) is too large" if value > 0
                       else "its compute per step, calibrated at the smallest point, is too large here")
        out.append(Miss(row["gpus"], row["error"], 1e3 * batch / row["measured"], 1e3 * batch / row["predicted"],
                        optimistic if row["error"] > 0 else pessimistic))
    return out
