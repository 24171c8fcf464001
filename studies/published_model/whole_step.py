"""The whole-step scaling model against every published point: its inputs and the check.

``studies.published_model.formulas`` holds the formulas; this module feeds them. Each input is a record (the
pipeline kind's images/s per core, a train record's per-step times for the straggler term, the
overlap record's hidden fraction) or a cited figure from ``studies/published_model/reference/links.json``. t_c is
calibrated on one published point of at most ``CALIBRATION_MAX_GPUS`` GPUs (the largest that fits
one node: a full node shares its loader cores and host the way every node of a larger run does);
every other point is a prediction, and the check says, per point, which term binds and how far the
prediction is from the published number. Inputs known only as a range (HAL's loader restart, the
February storage rate) give each prediction an error band; a point off by more than the tolerance
is solved for the value its unmeasured input would need there. Arithmetic only: the words and tables
are ``studies.published_model.whole_step_section``'s, the command line (``python -m studies.published_model --check``)
is ``studies/published_model/__main__.py``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import newest_sweep
from studies.published_model import formulas as scaling_model
from studies.common.overlap import hidden_fraction


@dataclass(frozen=True)
class Case:
    """One published table: the model (t_c calibrated) and its points (GPUs, batch/GPU, images/s)."""

    name: str
    model: scaling_model.WholeStep
    points: Tuple[Tuple[int, int, float], ...]
    calibration_gpus: int
    variants: Tuple[scaling_model.WholeStep, ...] = ()  # calibrated at the corners of the cited ranges: the error band
    values: Optional[dict] = None  # the ranged inputs' central values
    unmeasured: Tuple[str, str] = ("", "")  # (what measurement would decide a miss, the input it sets)


@dataclass(frozen=True)
class Measured:
    """Inputs taken from records, each with the record it came from (None: not measured yet)."""

    hidden_fraction: float = scaling_model.NO_OVERLAP
    overlap_source: Optional[str] = None
    rates: Tuple[Tuple[str, float, str], ...] = ()  # (backend, images per core-second, record)
    step_samples: Tuple[Tuple[str, Tuple[float, ...], str], ...] = ()  # (device type, per-step ms, record)

    def rate(self, backends) -> Tuple[Optional[float], Optional[str]]:
        """The first of ``backends`` (a name or names in order of preference) with a pipeline record."""
        names = [backends] if isinstance(backends, str) else list(backends)
        found = {b: (r, src) for b, r, src in self.rates}
        return next((found[b] for b in names if b in found), (None, None))

    def samples(self, device: str) -> Tuple[Tuple[float, ...], Optional[str]]:
        return next(((s, src) for d, s, src in self.step_samples if d == device), ((), None))


# ---------------------------------------------------------------- inputs from records

def pipeline_rates(pipeline: Sequence[Record]) -> Tuple[Tuple[str, float, str], ...]:
    """Images per core-second of each backend, 224 px train crops, from its newest pipeline record(s).

    The lowest rate of that record time's records (workers 0 and more): the capacity is not overstated. The shards
    bench's points (a source and backend named by ``variant``, no ``backend``) are not a backend's.
    """
    out = []
    for backend in sorted({r.point.backend for r in pipeline if r.point.backend}):
        rs = [r for r in pipeline if r.point.backend == backend and r.point.image_size == 224
              and (r.point.split or "train") == "train" and r.metrics.images_per_cpu_s]
        if rs:
            newest = max(r.time for r in rs)
            low = min((r for r in rs if r.time == newest), key=lambda r: r.metrics.images_per_cpu_s)
            out.append((backend, low.metrics.images_per_cpu_s, low.source))
    return tuple(out)


def step_samples(train: Sequence[Record]) -> Tuple[Tuple[str, Tuple[float, ...], str], ...]:
    """Per device type (cuda, cpu): the newest one-process train record's per-step times (``--step-times``).

    One process: its spread is the rank's own, not waits for other ranks.
    """
    out = {}
    for r in sorted(train, key=lambda r: r.time):
        m = r.metrics
        if m.step_times_ms and m.world_size == 1:
            out[str(m.device or "cpu").split(":")[0]] = (tuple(m.step_times_ms), r.source)
    return tuple((d, s, src) for d, (s, src) in sorted(out.items()))


def storage_ceiling(storage: Sequence[Record], bytes_per_image: float) -> Optional[Tuple[float, float, float, str]]:
    """Your cluster's storage from the newest ``hpc_imagenet.harness.bench scaling --io`` sweep: the highest aggregate
    MB/s and files/s of its points, and the images/s they allow (ImageFolder: files/s, one file per image;
    shards: MB/s over ``bytes_per_image``). None without storage records."""
    ok = [r for r in storage if r.metrics.mb_per_s]
    if not ok:
        return None
    pts = newest_sweep(ok)
    best_mb = max(pts, key=lambda r: r.metrics.mb_per_s)
    best_files = max(pts, key=lambda r: r.metrics.files_per_s)
    mbps, files = best_mb.metrics.mb_per_s, best_files.metrics.files_per_s
    per_file = (best_mb.point.format or "imagefolder").lower().startswith("imagefolder")
    # one open per image in an ImageFolder; shards hold many images per file, so their bytes bind
    images = files if per_file else mbps * 1e6 / bytes_per_image
    return mbps, files, images, best_mb.source


def model_overlap(overlap: Sequence[Record]) -> Tuple[float, Optional[dict]]:
    """The hidden fraction h the scaling model uses, and the overlap record it comes from.

    The newest sweep (by record time) wins; inside it, the record measured with DDP's default
    bucket size (the model's), else that sweep's newest record. h = 1 - exposed / alone from the
    record's metrics (what overlap_bench records as hidden_fraction). Without an overlap record:
    (``NO_OVERLAP``, None), the conservative assumption that all communication is exposed.
    """
    usable = [r for r in overlap if r.metrics.allreduce_alone_ms > 0]
    if not usable:
        return scaling_model.NO_OVERLAP, None
    sweep = sorted(newest_sweep(usable), key=lambda r: r.time)
    default = [r for r in sweep if (r.point.bucket_cap_mb or 0) * (1 << 20) == scaling_model.DDP_BUCKET_BYTES]
    rec = (default or sweep)[-1]
    return hidden_fraction(rec.metrics.exposed_comm_ms, rec.metrics.allreduce_alone_ms), rec


def measured(train: Sequence[Record], pipeline: Sequence[Record], overlap: Sequence[Record]) -> Measured:
    """What the records give the model: the hidden fraction (:func:`model_overlap`), the loaders' rates
    and the per-step times."""
    h, rec = model_overlap(overlap)
    return Measured(h, rec.source if rec else None, pipeline_rates(pipeline), step_samples(train))


# ---------------------------------------------------------------- the published cases

def _case(name: str, build: Callable[[dict], scaling_model.WholeStep], points: Sequence[Tuple[int, int, float]],
          ranges: Dict[str, Tuple[float, float]], unmeasured: Tuple[str, str]) -> Case:
    """Calibrate on the largest point of at most CALIBRATION_MAX_GPUS GPUs on one node, at its batch.

    ``build(values)`` makes the uncalibrated model from the ranged inputs' values; the central model
    takes each range's midpoint, and the band one model per corner of the ranges (each calibrated
    on the same point, so a range moves t_c too and never the calibration point itself).
    """
    gpus_per_node = build({k: lo for k, (lo, hi) in ranges.items()}).inputs.gpus_per_node
    fits = [p for p in points if p[0] <= min(scaling_model.CALIBRATION_MAX_GPUS, gpus_per_node)]
    if not fits:
        raise ValueError(f"{name}: no published point of at most {scaling_model.CALIBRATION_MAX_GPUS} GPUs "
                         "to calibrate on")
    n0, b0, x0 = max(fits)

    def fit(values: dict) -> scaling_model.WholeStep:
        return scaling_model.calibrate_whole(scaling_model.with_batch(build(values), b0), n0, x0)
    mid = {k: (lo + hi) / 2 for k, (lo, hi) in ranges.items()}
    corners = [dict(zip(ranges, c)) for c in itertools.product(*(sorted(set(r)) for r in ranges.values()))]
    return Case(name, fit(mid), tuple(points), n0, tuple(fit(c) for c in corners if c != mid), mid, unmeasured)


def _range(cited) -> Tuple[float, float]:
    """A cited figure as (low, high): a {"low", "high"} range, or one number."""
    return (cited["low"], cited["high"]) if isinstance(cited, dict) else (cited, cited)


def restart_range(facts: dict) -> Tuple[float, float]:
    return _range(facts["loader_restart_s"])


def hal_cases(pub: dict, links: dict, got: Measured) -> List[Case]:
    L = links["hal_2020"]
    rate, _ = got.rate(L["loader_backend"])
    pipe = scaling_model.Pipeline(L["cores_per_node"], rate, L["loader_workers_per_gpu"]) if rate else None
    samples, _ = got.samples("cuda")
    grad = parameter_count(L["arch"]) * L["grad_bytes_per_param"]
    cases = []
    for run in pub["hal_2020"]["runs"]:
        if run["label"] not in L["runs"]:
            continue
        b = run["batch_per_gpu"]
        batches = b if isinstance(b, list) else [b] * len(run["gpus"])
        inputs = scaling_model.ModelInputs(step_time_s=1.0, batch_per_gpu=batches[0], grad_bytes=grad,
                                           busbw_intra=L["busbw_intra"], alpha_intra_s=L["alpha_intra_s"],
                                           gpus_per_node=L["gpus_per_node"], busbw_inter=L["busbw_inter"],
                                           alpha_inter_s=L["alpha_inter_s"])

        def build(values: dict, inputs=inputs) -> scaling_model.WholeStep:
            epoch = scaling_model.Epoch(restart_s=values["loader_restart_s"], timed_every=L["timed_every"],
                                        drop_last=L["drop_last"])
            st = scaling_model.Storage(L["bytes_per_image"], values["storage_read_Bps"], L["storage_opens_per_s"])
            return scaling_model.WholeStep(inputs, L["hidden_fraction"], samples, pipe, st, epoch=epoch)
        pts = list(zip(run["gpus"], batches, run["train_img_per_s"]))
        # the read rates the run's storage is known to have delivered (its own 64-GPU run's peak, and May's)
        read_Bps = L.get("storage_read_Bps_runs", {}).get(run["label"], L["storage_read_Bps"])
        ranges = {"loader_restart_s": restart_range(L), "storage_read_Bps": _range(read_Bps)}
        cases.append(_case(f"HAL 2020 {run['label']}", build, pts, ranges, (L["unmeasured"], L["unmeasured_input"])))
    return cases


def dle_cases(pub: dict, links: dict, got: Measured) -> List[Case]:
    L = links["nvidia_dle_2021"]
    rate, _ = got.rate(L["loader_backend"])
    samples, _ = got.samples("cuda")
    params = parameter_count(L["arch"])
    cases = []
    for config, c in L["check_configs"].items():
        sysm = L["systems"][c["system"]]
        inputs = scaling_model.ModelInputs(step_time_s=1.0, batch_per_gpu=c["batch_per_gpu"],
                                           grad_bytes=params * c["grad_bytes_per_param"],
                                           busbw_intra=sysm["busbw_intra"], alpha_intra_s=sysm["alpha_intra_s"],
                                           gpus_per_node=sysm["gpus_per_node"])
        pipe = scaling_model.Pipeline(sysm["cores_per_node"], rate, sysm["loader_workers_per_gpu"]) if rate else None

        def build(values: dict, inputs=inputs, pipe=pipe) -> scaling_model.WholeStep:
            # workers persist: no restart
            return scaling_model.WholeStep(inputs, got.hidden_fraction, samples, pipe, None)
        published = pub["nvidia_dle_2021"]["train_img_per_s"][config]
        pts = sorted((int(n), c["batch_per_gpu"], x) for n, x in published.items())
        cases.append(_case(f"NVIDIA DLE {config}", build, pts, {}, (L["unmeasured"], L["unmeasured_input"])))
    return cases


# ---------------------------------------------------------------- the check

UNMEASURED = {  # the unmeasured inputs a miss can be solved for: (read from, set on) a calibrated model
    "loader_restart_s": (lambda w: w.epoch.restart_s, lambda w, v: replace(w, epoch=replace(w.epoch, restart_s=v))),
    "images_per_core_s": (lambda w: w.pipeline.images_per_core_s if w.pipeline else None,
                          lambda w, v: replace(w, pipeline=replace(w.pipeline, images_per_core_s=v))),
}


def needed_value(case: Case, gpus: int, batch: int, published: float) -> Optional[float]:
    """The value of the case's unmeasured input at which the model reproduces the published point at n GPUs,
    t_c and every other input as calibrated: the input at that point's load, not at the calibration's.
    None when the model has no such input or no value reaches the point."""
    key = case.unmeasured[1]
    w = scaling_model.with_batch(case.model, batch)
    if _cited(case, batch) is None:
        return None

    def err(value: float) -> float:
        return scaling_model.breakdown(UNMEASURED[key][1](w, value), gpus)["images_per_s"] - published
    lo, hi = 1e-3, 1e5
    e_lo = err(lo)
    if e_lo * err(hi) > 0:
        return None
    return scaling_model.bisect(lambda v: (err(v) > 0) == (e_lo > 0), lo, hi, 80, geometric=True)  # eight decades


def _cited(case: Case, batch: int) -> Optional[float]:
    """The model's value of the case's unmeasured input (None: the model has no such input)."""
    key = case.unmeasured[1]
    return UNMEASURED[key][0](scaling_model.with_batch(case.model, batch)) if key in UNMEASURED else None


def check_rows(cases: Sequence[Case]) -> List[dict]:
    """One row per published point: prediction, error and its band, binding term, each term in ms per step."""
    rows = []
    for case in cases:
        for n, b, x in case.points:
            p = scaling_model.breakdown(scaling_model.with_batch(case.model, b), n)
            band = [scaling_model.breakdown(scaling_model.with_batch(v, b), n)["images_per_s"]
                    for v in case.variants] + [p["images_per_s"]]
            errors = [scaling_model.relative_error(y, x) for y in band]
            measured_step = n * b / x
            rows.append({"case": case.name, "gpus": n, "batch": b, "measured": x, "predicted": p["images_per_s"],
                         "error": scaling_model.relative_error(p["images_per_s"], x), "error_low": min(errors),
                         "error_high": max(errors), "calibration": n == case.calibration_gpus,
                         "residual_s": measured_step - p["step_time_s"],
                         "residual_epoch_s": (measured_step - p["step_time_s"]) * p["timed_steps"],
                         "unmeasured": case.unmeasured[0], "unmeasured_input": case.unmeasured[1],
                         "cited_value": _cited(case, b), **p})
            if abs(rows[-1]["error"]) > scaling_model.CHECK_TOLERANCE:
                rows[-1]["needed_value"] = needed_value(case, n, b, x)
    return rows


def failures(rows: Sequence[dict], tolerance: float = scaling_model.CHECK_TOLERANCE) -> List[dict]:
    """The published points missed by more than ``tolerance`` (``--check`` exits 1 when there are any)."""
    return [r for r in rows if abs(r["error"]) > tolerance]


def cases(pub: dict, links: dict, got: Measured) -> List[Case]:
    return hal_cases(pub, links, got) + dle_cases(pub, links, got)
