"""Accuracy and throughput bookkeeping that stays on the device between log boundaries.

Sums live in one device tensor; nothing is read back to the host until a print interval or the
end of an epoch, so measuring does not slow down what is measured.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch

from hpc_imagenet.imagenet.process import group


def topk_correct(output: torch.Tensor, target: torch.Tensor, ks=(1, 5)) -> torch.Tensor:
    """Number of samples whose target is in the top-k predictions, for each k (a device tensor)."""
    maxk = min(max(ks), output.shape[1])
    pred = output.topk(maxk, dim=1).indices
    hit = pred.eq(target.view(-1, 1))
    return torch.stack([hit[:, :min(k, maxk)].any(dim=1).sum() for k in ks]).float()


class EpochMeter:
    """Running sums of loss, top-1 and top-5 hits and samples, on the device."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(4, device=device, dtype=torch.float64)

    def update(self, loss: torch.Tensor, output: torch.Tensor, target: torch.Tensor) -> None:
        n = target.shape[0]
        hits = topk_correct(output.detach(), target).double()
        # n goes in as a kernel argument: building a tensor from it would copy host->device every step
        self.sums[:3] += torch.cat([(loss.detach().double() * n).view(1), hits])
        self.sums[3] += n

    def local(self) -> Dict[str, float]:
        return _as_metrics(self.sums.tolist())

    def global_(self) -> Dict[str, float]:
        """Metrics over every rank (all-reduce of the sums: each sample counted once)."""
        return _as_metrics(group.all_reduce_sum(self.sums.clone()).tolist())


def _as_metrics(sums) -> Dict[str, float]:
    loss, top1, top5, n = sums
    n = max(n, 1.0)
    return {"loss": loss / n, "top1": 100.0 * top1 / n, "top5": 100.0 * top5 / n, "samples": int(sums[3])}


@dataclass
class StepClock:
    """Wall time split into waiting for data and everything else, summed between reads."""

    data_s: float = 0.0
    start: float = field(default_factory=time.perf_counter)
    _mark: float = field(default_factory=time.perf_counter)

    def data_ready(self) -> None:
        now = time.perf_counter()
        self.data_s += now - self._mark
        self._mark = now

    def step_done(self) -> None:
        self._mark = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


class StepTimes:
    """Wall time of each step, kept only when asked (``--step-times``), at most ``limit`` of them.

    On a GPU each step end records a CUDA event on the current stream (no host sync); the times
    between consecutive events are read at ``flush``, which the loop calls where it syncs anyway
    (print boundaries, epoch end). On a CPU the host clock is the step clock.
    """

    def __init__(self, device: torch.device, enabled: bool, limit: int = 10_000):
        self.enabled, self.limit, self.cuda = enabled, limit, device.type == "cuda"
        self.ms: list = []
        self._marks: list = []  # (event on GPU or perf_counter seconds on CPU, counted) since the last flush
        self._counted = 0

    def mark(self, counted: bool = True) -> None:
        """A step ended (``counted`` False: a warm-up step, only the start of the next one)."""
        if not self.enabled or (counted and len(self.ms) + self._counted >= self.limit):
            return
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        else:
            event = time.perf_counter()
        self._marks.append((event, counted))
        self._counted += counted

    def flush(self) -> None:
        """Turn the marks into step times; call only after the device was synchronised."""
        if len(self._marks) > 1:
            pairs = zip(self._marks, self._marks[1:])
            gaps = [(a.elapsed_time(b) if self.cuda else 1e3 * (b - a)) for (a, _), (b, ok) in pairs if ok]
            self.ms.extend(gaps)
        self._marks, self._counted = self._marks[-1:], 0

    def restart(self) -> None:
        """A new epoch: the gap across validation is not a step."""
        self._marks, self._counted = [], 0


class StepBreakdown:
    """Where each steady step's time goes, kept for every run: waiting for the loader (``data_wait_ms``), the
    host's time in the loop with the batch in hand (``host_ms``: launching the step's work, or doing it on a
    CPU, and the loop's bookkeeping), and on a GPU the step's span on the device's stream (``device_ms``,
    between CUDA events recorded where the batch arrived and where the next one is asked for).

    A device span close to the host's time means the GPU waited for the host (launch-bound); a longer one
    means the host ran ahead. Nothing syncs per step: the events are read at ``flush``, where the loop syncs
    anyway. Medians over the run's counted steps go into run.json; at most ``limit`` steps are kept.
    """

    def __init__(self, device: torch.device, limit: int = 20_000):
        self.cuda, self.limit = device.type == "cuda", limit
        self.data_wait_ms: list = []
        self.host_ms: list = []
        self.device_ms: list = []
        self._asked = self._ready = None  # host clock: next batch asked for, batch in hand
        self._events: list = []  # (start, end) CUDA events of counted steps since the last flush
        self._start_event = None

    def asking(self, counted: bool) -> None:
        """The loop asks for the next batch: the previous step's host time (and device span) end here."""
        now = time.perf_counter()
        if self._ready is not None and counted and len(self.host_ms) < self.limit:
            self.host_ms.append(1e3 * (now - self._ready))
            if self.cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._events.append((self._start_event, end))
        self._asked, self._ready = now, None

    def ready(self, counted: bool) -> None:
        """The batch is in hand."""
        self._ready = time.perf_counter()
        if self._asked is not None and counted and len(self.data_wait_ms) < self.limit:
            self.data_wait_ms.append(1e3 * (self._ready - self._asked))
        if self.cuda:
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()

    def flush(self) -> None:
        """Read the recorded device spans; call only after the device was synchronised."""
        self.device_ms.extend(start.elapsed_time(end) for start, end in self._events)
        self._events = []

    def epoch_end(self) -> None:
        """The gap across validation is neither a wait nor a step."""
        self._asked = self._ready = None

    def medians(self) -> Dict[str, Optional[float]]:
        def median(values: list) -> Optional[float]:
            return round(statistics.median(values), 3) if values else None
        return {"data_wait_ms": median(self.data_wait_ms), "host_ms": median(self.host_ms),
                "device_ms": median(self.device_ms), "steps": len(self.host_ms)}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
