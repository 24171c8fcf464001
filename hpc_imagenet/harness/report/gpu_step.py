"""Report sections "One GPU: throughput targets" and "Where the GPU step's time goes".

The targets: ResNet-50 with AMP on synthetic data at >= 6000 images/s and >= 3.3x the plain fp32
loop (``baseline``) of the same sweep; real JPEGs at >= 95 % of the synthetic figure with the
``fast`` backend at 14 loader workers and with the ``device`` (nvJPEG) and ``dali`` backends at 4;
peak memory for every point. The profile section reads the ``--profile-steps`` summaries that
train records carry. Every number is a recorded one or arithmetic on recorded ones.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from hpc_imagenet.harness.analysis import comparisons
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report.common import fmt, md_table, pct, prose

TARGET_IMAGES_PER_S, TARGET_SPEEDUP, TARGET_JPEG_FRACTION = 6000.0, 3.3, 0.95
# The loader setups the targets name, with the worker count each is judged at.
JPEG_TARGETS = (("engine-fp16", 14, "fast (CPU decode)"), ("engine-fp16-device-decode", 4, "device (nvJPEG)"),
                ("engine-fp16-dali", 4, "dali"))
SYNTHETIC_REFERENCE = "engine-fp16"  # the same step with no loader: what the JPEG runs are compared with
SAME = ("arch", "batch_size", "image_size")  # what a JPEG run and its synthetic reference share


def _gib(value: Optional[float]) -> str:
    return "-" if not value else f"{value / 2 ** 30:.1f}"


def amp_synthetic(train: Sequence[Record]) -> List[dict]:
    """The step comparisons (comparisons.step_rows) of mixed-precision GPU runs on synthetic data."""
    return [x for x in comparisons.step_rows(train) if x["record"].on_gpu
            and x["record"].point.precision != "O0" and x["record"].point.data == "dummy"]


def _synthetic_reference(train: Sequence[Record], record: Record) -> Optional[dict]:
    """The fastest engine-fp16 synthetic record of the same GPU, model, batch and code as R."""
    same = [s for s in train if s.status == "ok" and s.on_gpu and not s.profiled
            and s.point.setup == SYNTHETIC_REFERENCE and s.point.data == "dummy"
            and s.point_values(SAME) == record.point_values(SAME)
            and s.environment.gpu_name == record.environment.gpu_name
            and s.environment.source_digest == record.environment.source_digest]
    return max(same, key=lambda s: s.metrics.images_per_s, default=None)


TARGETS_COLUMNS = ("setup", "batch", "images/s", "vs baseline", "peak GiB", ">= {rate:g}", ">= {speedup:g}x", "record")


def targets_section(train: Sequence[Record]) -> str:
    gpu = [r for r in train if r.on_gpu and not r.profiled]
    if not gpu:
        return ""
    amp = sorted(amp_synthetic(train), key=lambda x: x["record"].time)
    rows = [[r.point.setup, r.point.batch_size, fmt(r.metrics.images_per_s), comparisons.times(x["throughput_ratio"]),
             _gib(r.metrics.peak_memory_bytes), r.metrics.images_per_s >= TARGET_IMAGES_PER_S,
             bool(x["throughput_ratio"]) and x["throughput_ratio"] >= TARGET_SPEEDUP, r.source]
            for x in amp for r in [x["record"]]]
    best = max((x["record"] for x in amp), key=lambda r: r.metrics.images_per_s, default=None)
    fastest = "" if not best else prose("gpu_step.fastest", r=best, rate=fmt(best.metrics.images_per_s),
                                        share=pct(best.metrics.images_per_s / TARGET_IMAGES_PER_S)) + "\n"
    return prose("gpu_step.targets", rate=TARGET_IMAGES_PER_S, speedup=TARGET_SPEEDUP, fastest=fastest,
                 jpeg=_jpeg_table(train),
                 table=md_table(TARGETS_COLUMNS, rows, rate=TARGET_IMAGES_PER_S, speedup=TARGET_SPEEDUP))


def jpeg_rows(train: Sequence[Record]) -> List[dict]:
    """Each JPEG run of a loader the targets name, with its synthetic reference and fraction (None when
    it failed or has no reference); a loader never measured gives one row with record None."""
    rows = []
    for setup, workers, label in JPEG_TARGETS:
        runs = [r for r in train if r.on_gpu and r.point.setup == setup
                and r.point.data != "dummy" and r.point.workers == workers]
        target = {"setup": setup, "workers": workers, "label": label}
        if not runs:
            rows.append({**target, "record": None, "ref": None, "fraction": None})
        for r in sorted(runs, key=lambda r: r.time):
            ref = _synthetic_reference(train, r) if r.status == "ok" else None
            fraction = r.metrics.images_per_s / ref.metrics.images_per_s if ref else None
            rows.append({**target, "record": r, "ref": ref, "fraction": fraction})
    return rows


JPEG_COLUMNS = ("loader", "setup", "workers", "JPEG images/s", "synthetic images/s", "fraction", ">= {fraction}",
                "record")


def _jpeg_table(train: Sequence[Record]) -> str:
    rows = []
    for x in jpeg_rows(train):
        r, ref, fraction = x["record"], x["ref"], x["fraction"]
        if r is None:
            rows.append([x["label"], x["setup"], x["workers"], "not measured", "-", "-", "-", "-"])
            continue
        rows.append([x["label"], x["setup"], x["workers"], fmt(r.metrics.images_per_s) if r.status == "ok"
                     else f"failed: {(r.error or '')[:80]}",
                     fmt(ref.metrics.images_per_s) if ref else "-", pct(fraction) if fraction else "-",
                     bool(fraction) and fraction >= TARGET_JPEG_FRACTION, r.source])
    fraction = pct(TARGET_JPEG_FRACTION)
    return prose("gpu_step.jpeg", fraction=fraction, table=md_table(JPEG_COLUMNS, rows, fraction=fraction))


def _families(profile: dict) -> Dict[str, float]:
    return {name: f["ms_per_step"] for name, f in profile["families"].items()}


PROFILE_COLUMNS = ("ms/step", "calls/step", "family", "kernel")


def profile_section(train: Sequence[Record]) -> str:
    """Device time per kernel family of each profiled run, and its top kernels."""
    profiled = [r for r in train if r.status == "ok" and r.profile and r.on_gpu]
    if not profiled:
        return ""
    runs = [(r, r.profile) for r in sorted(profiled, key=lambda r: r.time)]
    names = sorted({f for _, p in runs for f in p["families"]}, key=lambda f: -max(_families(p).get(f, 0.0)
                                                                                  for _, p in runs))
    header = ["kernel family"] + [f"{r.point.setup} ({r.source}) ms/step" for r, _ in runs]
    table = [[f] + [fmt(_families(p).get(f)) for _, p in runs] for f in names]
    table.append(["**all kernels**"] + [fmt(p["device_ms_per_step"]) for _, p in runs])
    out = prose("gpu_step.profile", table=md_table(header, table))
    for r, p in runs:
        top = [[fmt(k["ms_per_step"]), f"{k['calls_per_step']:g}", k["family"], f"`{k['name'][:110]}`"]
               for k in p["top_kernels"][:8]]
        out += (f"\nTop kernels of `{r.point.setup}` ({r.source}):\n\n"
                + md_table(PROFILE_COLUMNS, top))
    return out + _kernel_bound(runs, train) + _bf16_gap(runs)


def _kernel_bound(runs: Sequence[tuple], train: Sequence[Record]) -> str:
    """The images/s the newest compiled profile's device time allows, beside the fastest compiled speed:
    when they agree, the host adds nothing and only faster kernels make the step faster."""
    compiled = [(r, p) for r, p in runs if "compile" in (r.point.setup or "")]
    if not compiled:
        return ""
    r, p = compiled[-1]
    batch = r.point.batch_size
    bound = batch * 1000.0 / p["device_ms_per_step"]
    fams = _families(p)
    top = sorted(fams.items(), key=lambda kv: -kv[1])[:2]
    shares = ", ".join(f"{name} {ms:.1f} ms ({pct(ms / p['device_ms_per_step'])})" for name, ms in top)
    speeds = [s.metrics.images_per_s for s in train if s.status == "ok" and s.on_gpu
              and not s.profiled and s.point.batch_size == batch
              and s.point.setup in ("engine-fp16-compile", "engine-fp16-cudagraphs")]
    measured = f"; the fastest compiled run at batch {batch} measured {fmt(max(speeds))}" if speeds else ""
    verdict = ("is kernel-bound" if speeds and max(speeds) >= 0.97 * bound
               else "leaves the device idle part of the time" if speeds else "(no unprofiled run to compare)")
    return prose("gpu_step.kernel_bound", verdict=verdict, setup=r.point.setup, device=fmt(p["device_ms_per_step"]),
                 batch=batch, bound=fmt(bound), measured=measured, shares=shares) + "\n"


def _bf16_gap(runs: Sequence[tuple]) -> str:
    """fp16 vs bf16 from the newest profile of each: which families the difference sits in."""
    newest = {r.point.setup: p for r, p in runs}
    fp16, bf16 = newest.get("engine-fp16"), newest.get("engine-bf16")
    if not (fp16 and bf16):
        return ""
    gap = bf16["device_ms_per_step"] - fp16["device_ms_per_step"]
    diffs = sorted(((f, _families(bf16).get(f, 0.0) - _families(fp16).get(f, 0.0)) for f in _families(bf16)),
                   key=lambda kv: -kv[1])
    bn = {name: [k["name"].split("<")[0].split("(")[0].replace("void ", "") for k in p["top_kernels"]
                 if k["family"] == "batchnorm"][:2] for name, p in (("fp16", fp16), ("bf16", bf16))}
    return prose("gpu_step.bf16_gap", bf16=fmt(bf16["device_ms_per_step"]), fp16=fmt(fp16["device_ms_per_step"]),
                 gap=gap, parts=", ".join(f"{f} {d:+.1f} ms" for f, d in diffs if abs(d) >= 0.5),
                 **{f"{name}_bn": ", ".join(f"`{n}`" for n in kernels) for name, kernels in bn.items()}) + "\n"
