"""A first-order model of data-parallel scaling: compute time per step plus gradient all-reduce.

Per step on n GPUs (batch b each, single-GPU step time t_c, gradient bytes G, in DDP buckets):

    t_comm(n) = k * 2(n-1) * alpha  +  2(n-1)/n * G / B        (ring all-reduce; 0 for n = 1)
    hidden(n) = min(h * t_comm(n), f * t_c)                     (what backward hides)
    t(n)      = t_c + max(0, t_comm(n) - hidden(n))            (exposed communication added)
    throughput(n) = n b / t(n),  efficiency(n) = t_c / t(n)

with k = ceil(G / bucket) all-reduce calls, alpha the per-hop latency, B the bus bandwidth
(nccl-tests "busbw") of the slowest link the ring crosses: intra-node while n fits one node,
inter-node beyond, f the backward share of the step, and h the *hidden fraction*: the share of
the all-reduce that runs while backward still computes.

h is an input, not a fit:

- h = 0 (``NO_OVERLAP``): every byte is exposed, t(n) = t_c + t_comm(n). The conservative
  assumption, and the default when nothing was measured.
- h = 1 (``FULL_OVERLAP``): ideal overlap, t(n) = (1-f) t_c + max(f t_c, t_comm(n)); only the
  part of t_comm longer than backward is exposed (communication cannot start before backward).
- measured h: ``hidden_fraction`` of an overlap record (studies/common/overlap.py), i.e.
  1 - exposed / (all-reduce alone) for one model, bucket size and world size. Using it at every
  n assumes that the same share of the all-reduce hides whatever the link and the GPU count; the
  cap f t_c still applies, so a slow link is never hidden by a short backward. The benchmark
  clamps h at 0: when contention makes the exposed time exceed the all-reduce alone (CPU ranks
  sharing cores), the model does not see that slowdown.

The whole step (``WholeStep``, ``breakdown``) adds what the GPUs wait for besides the all-reduce:

    wait(n)    = t_c (E[max of n step times] / E[step time] - 1)   stragglers: a synchronous step
                 waits for the slowest rank; the expectation comes from a measured per-step sample
    t_sync(n)  = t(n) + wait(n)
    pipeline   = nodes(n) x loader cores x images/s per core        the loaders' steady capacity
    step(n)    = max(t_sync(n), n b / pipeline)                     data wait when the loaders are slower

and, per epoch of S(n) steps of which the timer reads S_t(n) (a script that reads its clock every
k steps leaves the last S mod k untimed):

    epoch(n)   = max(R + S(n) step(n), epoch bytes / read rate, epoch files / opens rate)
    images/s   = n b S_t(n) / (R + S_t(n) step'(n)),  step'(n) = (epoch(n) - R) / S(n)

R is the loader restart the timer sees each epoch (workers created afresh before the first batch;
0 when they persist). Storage is an epoch-level bound, not a steady cap: an epoch cannot be shorter
than reading its bytes at the measured rate, and a published peak rate is a lower bound of what the
storage can do, so it bounds from that side only. The *binding* term is the one whose removal would
raise the prediction most; ``compute`` when nothing does. Every input is a measurement or a cited
figure; ``calibrate_whole`` fixes t_c on one point of at most ``CALIBRATION_MAX_GPUS`` GPUs, and the
other points are predictions.

What it still leaves out is said where it is checked (``python -m studies.published_model --check``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Dict, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES

DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb default
BACKWARD_FRACTION = 2.0 / 3.0  # backward ~ twice the forward's FLOPs
NO_OVERLAP = 0.0  # hidden fraction h: nothing hidden (the default without an overlap record)
FULL_OVERLAP = 1.0  # all of the all-reduce hides, up to the backward time


@dataclass(frozen=True)
class ModelInputs:
    """Everything the prediction depends on; bandwidths in bytes/s, times in seconds."""

    step_time_s: float
    batch_per_gpu: int
    grad_bytes: float
    busbw_intra: float
    alpha_intra_s: float = 0.0
    gpus_per_node: int = 1 << 30  # one node unless said otherwise
    busbw_inter: Optional[float] = None
    alpha_inter_s: Optional[float] = None
    bucket_bytes: float = DDP_BUCKET_BYTES
    backward_fraction: float = BACKWARD_FRACTION

    def global_batch(self, gpus: int) -> int:
        """Images per synchronous step on GPUS."""
        return gpus * self.batch_per_gpu


def comm_time(inputs: ModelInputs, gpus: int) -> float:
    """Seconds per step spent all-reducing gradients on n GPUs."""
    if gpus <= 1:
        return 0.0
    inter = gpus > inputs.gpus_per_node and inputs.busbw_inter is not None
    bw = inputs.busbw_inter if inter else inputs.busbw_intra
    alpha = inputs.alpha_inter_s if inter and inputs.alpha_inter_s is not None else inputs.alpha_intra_s
    calls = math.ceil(inputs.grad_bytes / inputs.bucket_bytes)
    return calls * 2 * (gpus - 1) * alpha + 2 * (gpus - 1) / gpus * inputs.grad_bytes / bw


def step_time(inputs: ModelInputs, gpus: int, hidden_fraction: float) -> float:
    """Seconds per step: compute plus the exposed part of the all-reduce (see the module docstring); backward
    hides h t_comm(n) of it, at most the backward time f t_c."""
    if not 0.0 <= hidden_fraction <= 1.0:
        raise ValueError(f"hidden fraction {hidden_fraction!r} is not in [0, 1]")
    comm = comm_time(inputs, gpus)
    hidden = min(hidden_fraction * comm, inputs.backward_fraction * inputs.step_time_s)
    return inputs.step_time_s + max(0.0, comm - hidden)


def predict(inputs: ModelInputs, gpus: int, hidden_fraction: float) -> Dict[str, float]:
    t = step_time(inputs, gpus, hidden_fraction)
    return {"gpus": gpus, "step_time_s": t, "comm_time_s": comm_time(inputs, gpus),
            "exposed_comm_s": t - inputs.step_time_s,
            "images_per_s": inputs.global_batch(gpus) / t, "efficiency": inputs.step_time_s / t}


def bisect(keep_low: Callable[[float], bool], lo: float, hi: float, steps: int = 100,
           geometric: bool = False) -> float:
    """Where KEEP_LOW turns false in [LO, HI] (true below, false above): STEPS halvings of the bracket,
    at its arithmetic or (GEOMETRIC, for a bracket of several decades) geometric middle."""
    def middle(low: float, high: float) -> float:
        return (low * high) ** 0.5 if geometric else (low + high) / 2
    for _ in range(steps):
        mid = middle(lo, hi)
        lo, hi = (mid, hi) if keep_low(mid) else (lo, mid)
    return middle(lo, hi)


def calibrate(inputs: ModelInputs, gpus: int, measured_step_s: float, hidden_fraction: float) -> ModelInputs:
    """The single-GPU step time that makes the model reproduce a step time measured on n GPUs.

    For published tables with no 1-GPU row: t(n) grows monotonically with t_c, so bisection on
    t_c in (0, measured] finds it. Returns ``inputs`` with that step time.
    """
    t_c = bisect(lambda t: step_time(replace(inputs, step_time_s=t), gpus, hidden_fraction) < measured_step_s,
                 0.0, measured_step_s)
    return replace(inputs, step_time_s=t_c)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured: positive when the model is optimistic."""
    return (predicted - measured) / measured


# ---------------------------------------------------------------- the whole step

CALIBRATION_MAX_GPUS = 4  # t_c comes from a point of at most this many GPUs; larger ones are predicted
CHECK_TOLERANCE = 0.10  # --check fails when a prediction misses a published point by more than this
TERMS = ("compute", "all-reduce", "stragglers", "input pipeline", "loader restart", "storage bandwidth",
         "storage opens")


@dataclass(frozen=True)
class Pipeline:
    """A node's input pipeline: loader cores x images/s one core decodes and augments.

    With ``workers_per_gpu`` set, a node decodes on min(workers of its GPUs' processes, its cores):
    a node that runs 2 of its 4 GPUs starts half the workers.
    """

    loader_cores_per_node: float
    images_per_core_s: float
    workers_per_gpu: Optional[float] = None

    def capacity(self, gpus: int, gpus_per_node: int) -> float:
        """images/s the loaders of n GPUs deliver, ``gpus_per_node`` to a node."""
        full, rest = divmod(gpus, gpus_per_node)
        return sum(self._node(g) for g in [gpus_per_node] * full + ([rest] if rest else []))

    def _node(self, gpus: int) -> float:
        cores = self.loader_cores_per_node
        if self.workers_per_gpu is not None:
            cores = min(cores, self.workers_per_gpu * gpus)
        return cores * self.images_per_core_s


@dataclass(frozen=True)
class Storage:
    """Shared storage rates, aggregate over all nodes (None: no rate known). An epoch-level bound: an epoch
    cannot take less time than reading its bytes (or opening its files) at these rates."""

    bytes_per_image: float
    read_bytes_per_s: Optional[float] = None
    opens_per_s: Optional[float] = None
    opens_per_image: float = 1.0  # one file per image (ImageFolder)


@dataclass(frozen=True)
class Epoch:
    """How a throughput figure times an epoch.

    ``restart_s``: seconds per epoch that the timer sees before the first batch (loader workers started
    afresh every epoch, 0 when they persist); it is spread over the timed steps. ``timed_every``: the
    timer is read every k steps, so the steps after the last multiple of k go untimed. ``drop_last``:
    the sampler drops the last partial batch (else each rank's share is padded and the last batch kept).
    The default (no restart, every step timed) is this project's engine: its loader workers persist
    across epochs and its images/s is timed after a few warm-up steps of each epoch.
    """

    images: int = IMAGENET_TRAIN_IMAGES
    restart_s: float = 0.0
    timed_every: int = 1
    drop_last: bool = False

    def steps(self, gpus: int, batch: int) -> int:
        per_rank = math.ceil(self.images / gpus)  # DistributedSampler pads every rank to the same count
        return per_rank // batch if self.drop_last else math.ceil(per_rank / batch)

    def timed_steps(self, gpus: int, batch: int) -> int:
        s = self.steps(gpus, batch)
        return max(self.timed_every, s - s % self.timed_every)


@dataclass(frozen=True)
class WholeStep:
    """Compute and all-reduce (``ModelInputs``) plus stragglers, input pipeline, loader restart and storage."""

    inputs: ModelInputs
    hidden_fraction: float = NO_OVERLAP
    step_samples: Tuple[float, ...] = ()  # measured per-step times (any unit); empty: no straggler term
    pipeline: Optional[Pipeline] = None
    storage: Optional[Storage] = None
    off: Tuple[str, ...] = ()  # terms switched off (to see what each one costs)
    epoch: Epoch = Epoch()


def expected_max(samples: Sequence[float], gpus: int) -> float:
    """E[max of n independent draws] from the empirical distribution of ``samples``.

    With x_(1) <= ... <= x_(m) sorted, P(max = x_(i)) = (i/m)^n - ((i-1)/m)^n: exact for the
    sample's distribution, and never beyond its largest value (m should exceed n for a fair tail).
    """
    xs = sorted(samples)
    m = len(xs)
    if not m:
        raise ValueError("no per-step times to take a maximum of")
    return sum(x * ((i / m) ** gpus - ((i - 1) / m) ** gpus) for i, x in enumerate(xs, start=1))


def straggler_factor(samples: Sequence[float], gpus: int) -> float:
    """E[max of n step times] / E[step time]: how much longer a step that waits for n ranks takes."""
    if not samples or gpus <= 1:
        return 1.0
    return expected_max(samples, gpus) / (sum(samples) / len(samples))


def _storage_epoch_s(model: WholeStep, images: int) -> Dict[str, float]:
    """Seconds the storage needs to serve one epoch's images (only the rates known and switched on)."""
    st, out = model.storage, {}
    if st and st.read_bytes_per_s and "storage bandwidth" not in model.off:
        out["storage bandwidth"] = images * st.bytes_per_image / st.read_bytes_per_s
    if st and st.opens_per_s and "storage opens" not in model.off:
        out["storage opens"] = images * st.opens_per_image / st.opens_per_s
    return out


def _images_per_s(model: WholeStep, gpus: int) -> Tuple[float, dict]:
    """The timed images/s at n GPUs and the terms behind it (see ``breakdown``)."""
    m, ep = model.inputs, model.epoch
    exposed = 0.0 if "all-reduce" in model.off else step_time(m, gpus, model.hidden_fraction) - m.step_time_s
    factor = 1.0 if "stragglers" in model.off else straggler_factor(model.step_samples, gpus)
    wait = m.step_time_s * (factor - 1.0)
    t_sync = m.step_time_s + exposed + wait
    pipe = (model.pipeline.capacity(gpus, m.gpus_per_node) if model.pipeline and "input pipeline" not in model.off
            else None)
    t_step = max(t_sync, m.global_batch(gpus) / pipe) if pipe else t_sync  # a steady-state ceiling
    restart = 0.0 if "loader restart" in model.off else ep.restart_s
    steps, timed = ep.steps(gpus, m.batch_per_gpu), ep.timed_steps(gpus, m.batch_per_gpu)
    storage = _storage_epoch_s(model, steps * m.global_batch(gpus))  # padded samples are read too
    read_s = max(storage.values(), default=0.0)  # the epoch (restart included) is at least its reading time
    t_read = max(t_step, (read_s - restart) / steps)  # per step, once that bound stretches the epoch
    epoch_s = restart + steps * t_read
    x = m.global_batch(gpus) * timed / (restart + timed * t_read)
    return x, {"exposed_comm_s": exposed, "straggler_s": wait, "pipeline_images_per_s": pipe,
               "data_wait_s": t_step - t_sync, "restart_s": restart, "restart_per_step_s": restart / timed,
               "storage_wait_s": t_read - t_step, "steps": steps, "timed_steps": timed, "epoch_s": epoch_s,
               "storage_epoch_s": storage}


def breakdown(model: WholeStep, gpus: int) -> Dict[str, object]:
    """The prediction at n GPUs, each term's share, and the binding term.

    Per step: t_sync = t_c + exposed all-reduce + straggler wait; the input pipeline stretches it to
    n b / capacity when that is longer (data wait). Per epoch: the timer sees the loader restart R plus
    the timed steps, and the epoch (R + steps x step) lasts at least as long as the storage needs to read
    (and open) its images; a longer read stretches every step (storage wait). The timed images/s is
    n b timed / (R + timed x step).
    """
    x, parts = _images_per_s(model, gpus)
    gains = {term: _images_per_s(replace(model, off=model.off + (term,)), gpus)[0] - x
             for term in TERMS[1:] if term not in model.off}
    best = max(gains, key=gains.get) if gains else None
    binding = best if best is not None and gains[best] > 1e-9 * x else "compute"
    m = model.inputs
    t = m.global_batch(gpus) / x
    return {"gpus": gpus, "images_per_s": x, "step_time_s": t, "efficiency": m.step_time_s / t,
            "compute_s": m.step_time_s, "binding": binding, **parts}


def calibrate_whole(model: WholeStep, gpus: int, measured_images_per_s: float) -> WholeStep:
    """``model`` with the t_c that makes the whole-step model reproduce one measured point of n GPUs.

    Raises ValueError when n exceeds ``CALIBRATION_MAX_GPUS`` (a larger point must be predicted, not
    fitted) or when a ceiling binds there (then t_c cannot be read from that point).
    """
    if gpus > CALIBRATION_MAX_GPUS:
        raise ValueError(f"calibration point has {gpus} GPUs; calibrate on at most {CALIBRATION_MAX_GPUS}")
    def at(t_c: float) -> WholeStep:
        return replace(model, inputs=replace(model.inputs, step_time_s=t_c))
    out = at(bisect(lambda t: _images_per_s(at(t), gpus)[0] > measured_images_per_s,
                    0.0, model.inputs.global_batch(gpus) / measured_images_per_s))
    got = _images_per_s(out, gpus)[0]
    if abs(got - measured_images_per_s) > 1e-6 * measured_images_per_s:
        raise ValueError(f"{breakdown(out, gpus)['binding']} caps {gpus} GPUs at {got:.0f} images/s, below the "
                         f"measured {measured_images_per_s:.0f}: t_c cannot be calibrated there")
    return out


def with_batch(model: WholeStep, batch: int) -> WholeStep:
    """The same cluster at another batch per GPU: compute time per image held (large-batch GPU regime)."""
    m = model.inputs
    return replace(model, inputs=replace(m, batch_per_gpu=batch, step_time_s=m.step_time_s * batch / m.batch_per_gpu))
