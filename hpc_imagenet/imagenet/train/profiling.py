"""``--profile-steps N``: a torch.profiler capture of N training steps, summarised into run.json.

Why: a throughput number says how fast a step is, not where its time goes. Comparing fp16 with
bf16, or eager with compiled, needs the device time per kernel. The capture starts after the
first epoch's warm-up steps (loader start, cuDNN autotuning) and records CPU and CUDA activity of
rank 0 only. At its end run.json gets a ``profile`` entry: device time per step, the share of each
kernel family and the top kernels by device time; the Chrome trace is written beside it
(``profile_trace.json.gz``, for Perfetto or chrome://tracing).

Profiled steps are slower than normal ones (the profiler records every launch), so a profiled
run's throughput is not a benchmark figure: profile in a separate run.
"""
from __future__ import annotations

import gzip
import logging
import shutil
from pathlib import Path
from typing import Callable, Dict, List

import torch

from hpc_imagenet.imagenet.common import files

log = logging.getLogger(__name__)

TOP_KERNELS = 20
TRACE_FILE = "profile_trace.json.gz"
# Kernel families by name fragments: a heuristic, first match wins. cuDNN and CUTLASS name their
# convolution kernels after the pass they run (fprop, dgrad, wgrad) or the implicit GEMM they use.
FAMILIES = (
    ("optimizer", ("multi_tensor", "fused_sgd", "_fused_sgd", "foreach")),
    ("batchnorm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "welford")),
    ("reduction / pooling", ("pool", "reduce_kernel", "triton_red", "softmax", "nll_loss", "cross_entropy")),
    ("convolution", ("conv", "cudnn", "fprop", "dgrad", "wgrad", "implicit", "xmma", "sm90_", "sm80_", "cutlass",
                     "gemm")),
    ("copy / layout", ("memcpy", "memset", "copy", "transpose", "permute")),
    ("elementwise / pointwise", ("elementwise", "vectorized", "pointwise", "triton_poi", "relu", "add", "mul")),
)


def family(kernel_name: str) -> str:
    name = kernel_name.lower()
    for label, fragments in FAMILIES:
        if any(f in name for f in fragments):
            return label
    return "other"


class _Off:
    """The profiler when --profile-steps is 0 (or on ranks other than 0): does nothing."""

    def step(self) -> None:
        pass

    def close(self) -> None:
        pass


class StepProfiler:
    """Wraps torch.profiler with a wait/warm-up/active schedule counted in training steps."""

    def __init__(self, steps: int, skip: int, run_dir: Path, device: torch.device,
                 on_summary: Callable[[dict], None]):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.steps, self.run_dir, self.device, self.on_summary = steps, run_dir, device, on_summary
        schedule = torch.profiler.schedule(wait=max(0, skip - 1), warmup=1, active=steps, repeat=1)
        self.prof = torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=self._ready)
        self.prof.start()
        self.done = False

    def step(self) -> None:
        if not self.done:
            self.prof.step()

    def close(self) -> None:
        if not self.done:
            self.prof.stop()  # a short epoch ended before the schedule did: summarise what was captured
            self.done = True

    def _ready(self, prof) -> None:
        self.done = True
        summary = summarize(prof.key_averages(), self.steps, self.device.type)
        trace = self.run_dir / TRACE_FILE
        try:
            _export_trace(prof, trace)
            summary["trace"] = trace.name
        except (OSError, RuntimeError) as e:  # the summary matters more than the trace
            log.warning("could not write the profiler trace %s: %s", trace, e)
        self.on_summary(summary)
        log.info("profile: %.2f ms of device time per step over %d steps; top kernel %s", summary["device_ms_per_step"],
                 self.steps, summary["top_kernels"][0]["name"] if summary["top_kernels"] else "-")


def _export_trace(prof, path: Path) -> None:
    raw = path.with_suffix("")  # profile_trace.json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src:
        files.atomic_write(path, lambda f: _gzip(src, f))
    raw.unlink()


def _gzip(src, out) -> None:
    with gzip.GzipFile(filename="", fileobj=out, mode="wb") as dst:  # no temp name in the header
        shutil.copyfileobj(src, dst)


def _device_us(event) -> float:
    """Self device time of an averaged event in us (the attribute was renamed in torch 2.4+)."""
    value = getattr(event, "self_device_time_total", None)
    return float(value if value is not None else getattr(event, "self_cuda_time_total", 0.0))


def _is_device_event(event) -> bool:
    device_type = getattr(event, "device_type", None)
    return device_type is not None and str(device_type).endswith(("CUDA", "PrivateUse1"))


def is_step_marker(name: str) -> bool:
    """The profiler's own per-step span (ProfilerStep#N, averaged as ProfilerStep*): on a GPU it
    carries the whole step's device time, so counting it as a kernel would count the step twice."""
    return name.startswith("ProfilerStep")


def without_step_markers(summary: dict) -> dict:
    """A summary with the step spans taken out of its totals, its "other" family and its top list.

    Summaries written before step spans were left out (they show up as a kernel named
    ``ProfilerStep*``) are corrected this way when read; newer ones come out unchanged.
    """
    markers = [k for k in summary.get("top_kernels", []) if is_step_marker(k["name"])]
    if not markers:
        return summary
    marker_ms = sum(k["ms_per_step"] for k in markers)
    total = summary["device_ms_per_step"] - marker_ms
    families = {name: dict(f, ms_per_step=f["ms_per_step"] - (marker_ms if name == "other" else 0.0))
                for name, f in summary.get("families", {}).items()}
    families = {name: dict(f, share=f["ms_per_step"] / total) for name, f in families.items()}
    top = [dict(k, share=k["ms_per_step"] / total) for k in summary["top_kernels"] if not is_step_marker(k["name"])]
    return dict(summary, device_ms_per_step=total, families=families, top_kernels=top,
                kernels_per_step=summary["kernels_per_step"] - sum(k["calls_per_step"] for k in markers))


def summarize(events, steps: int, device_type: str) -> dict:
    """Device time per step, per kernel family, and the top kernels, from key_averages().

    On a GPU the units are kernels (and copies) with their device time. On a CPU, where there are
    no kernels, they are the operators with their self CPU time, so the summary means the same:
    where the step's compute time goes.
    """
    if device_type == "cuda":
        time_us = _device_us
        kernels = [e for e in events if _is_device_event(e) and time_us(e) > 0 and not is_step_marker(e.key)]
    else:
        time_us = lambda e: float(e.self_cpu_time_total)  # noqa: E731
        kernels = [e for e in events if time_us(e) > 0 and not is_step_marker(e.key)]
    total_us = sum(time_us(e) for e in kernels)
    by_family: Dict[str, float] = {}
    for e in kernels:
        by_family[family(e.key)] = by_family.get(family(e.key), 0.0) + time_us(e)
    top: List[dict] = [{"name": e.key[:160], "family": family(e.key), "calls_per_step": e.count / steps,
                        "ms_per_step": time_us(e) / steps / 1000, "share": time_us(e) / total_us}
                       for e in sorted(kernels, key=time_us, reverse=True)[:TOP_KERNELS]]
    return {"steps": steps, "device": device_type, "device_ms_per_step": total_us / steps / 1000,
            "kernels_per_step": sum(e.count for e in kernels) / steps,
            "families": {k: {"ms_per_step": v / steps / 1000, "share": v / total_us}
                         for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])} if total_us else {},
            "top_kernels": top}


def start(steps: int, skip: int, primary: bool, run_dir: Path, device: torch.device,
          on_summary: Callable[[dict], None]):
    """A StepProfiler for rank 0 when STEPS > 0, else an object whose methods do nothing."""
    if steps <= 0 or not primary:
        return _Off()
    return StepProfiler(steps, skip, run_dir, device, on_summary)


