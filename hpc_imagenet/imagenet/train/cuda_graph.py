"""The whole training step as one CUDA graph (``--cuda-graph``): forward, loss, backward and the optimizer's
step are captured once, after a few eager steps on a side stream, and replayed from static input buffers, as
torch documents whole-network capture (torch.cuda.graphs). The host then launches one graph a step instead
of hundreds of kernels, which is what holds small steps and fast GPUs back; no compiler is involved, so the
first step comes as soon as eager's.

What stays outside the graph, each step: copying the batch into the static buffers, the LR schedule (the
learning rate becomes a device tensor that the scheduler fills in place), and the EMA of the weights (its
update every few steps is host control flow). Where the run does not allow a graph (:func:`why_not`), the
loop stays eager and says why in one line; a batch of another shape (a last partial batch) runs eagerly.

Written here rather than taken from a library: torch gives the capture primitives, and what may be captured
depends on this engine's parts (its precision wrapper, optimizer and loop).
"""
from __future__ import annotations

import logging
from typing import Callable, List, Optional, Tuple

import torch

log = logging.getLogger(__name__)

WARMUP_STEPS = 3  # eager steps on a side stream before capture: cuDNN picks its kernels, the optimizer its state


def why_not(cfg, device: torch.device, world_size: int, optimizer_name: str, scale: object,
            fused: bool = True) -> Optional[str]:
    """Why this run cannot replay its step as a CUDA graph (CFG: the settings; FUSED: the optimizer steps with
    torch's fused kernel, the one SGD path that reads a learning rate from the device), or None."""
    checks = [
        (device.type != "cuda", "it needs a CUDA GPU"),
        (cfg.run.variant == "dp", "DataParallel drives each GPU from a thread of its own, which a graph cannot hold"),
        (world_size > 1, "capturing DDP's all-reduce is not supported here yet (one process only)"),
        (cfg.perf.use_compile, "--compile makes graphs of its own (use --compile-mode reduce-overhead instead)"),
        (cfg.batch.accum_steps > 1, "gradient accumulation runs a variable number of backward passes per step"),
        (cfg.data.min_res is not None, "progressive resizing changes the input's shape between epochs"),
        (bool(cfg.data.mixup_alpha or cfg.data.cutmix_alpha), "mixup and cutmix draw on the host every step"),
        (cfg.precision.precision_level in ("O2", "O3"), "O2/O3's master-weight copies are not captured here yet"),
        (scale == "dynamic", "fp16's dynamic loss scale skips steps by a host decision (use bf16, or a static "
                             "--loss-scale)"),
        (optimizer_name != "sgd", f"the {optimizer_name} optimizer is not known to be capturable (SGD is)"),
        (optimizer_name == "sgd" and not fused, "SGD's foreach and plain steps read the learning rate on the host "
                                                "(use --optimizer-impl fused, auto's choice on GPUs)"),
    ]
    reasons = [why for failed, why in checks if failed]
    return reasons[0] if reasons else None


def fallback_line(why: str) -> str:
    return f"--cuda-graph: {why}; running the step eagerly"


class GraphStep:
    """The training step, eager for WARMUP_STEPS on a side stream, then captured and replayed.

    ``step_fn(images, target)`` runs one whole step (zero_grad, forward, backward, optimizer step) on device
    tensors and returns (loss, output, target); ``prepare(batch)`` turns a loader batch into those tensors.
    """

    def __init__(self, step_fn: Callable, prepare: Callable, optimizer: torch.optim.Optimizer):
        self.step_fn, self.prepare, self.optimizer = step_fn, prepare, optimizer
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_in: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
        self.static_out: Optional[tuple] = None
        self.eager_steps = 0
        self.failed: Optional[str] = None

    def __call__(self, batch: tuple) -> List[tuple]:
        images, target = self.prepare(batch)
        if self.graph is not None and self._fits(images, target):
            self.static_in[0].copy_(images, non_blocking=True)
            self.static_in[1].copy_(target, non_blocking=True)
            self.graph.replay()
            return [self.static_out]
        if self.graph is None and self.failed is None and self.eager_steps >= WARMUP_STEPS:
            self._capture(images, target)
            if self.graph is not None:
                return [self.static_out]  # capturing ran nothing: replay it once for this batch
        return [self._eager(images, target)]

    def _fits(self, images: torch.Tensor, target: torch.Tensor) -> bool:
        return images.shape == self.static_in[0].shape and target.shape == self.static_in[1].shape

    def _eager(self, images: torch.Tensor, target: torch.Tensor) -> tuple:
        """One step on a side stream (as capture wants its warm-up), joined back to the current one."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self.step_fn(images, target)
        torch.cuda.current_stream().wait_stream(side)
        self.eager_steps += 1
        return out

    def _capture(self, images: torch.Tensor, target: torch.Tensor) -> None:
        tensor_lr(self.optimizer)
        self.static_in = (images.clone(), target.clone())
        graph = torch.cuda.CUDAGraph()
        try:
            self.optimizer.zero_grad(set_to_none=True)  # grads are allocated from the graph's pool
            with torch.cuda.graph(graph):
                self.static_out = self.step_fn(*self.static_in)
        except Exception as e:  # a part that cannot be captured: the run goes on eagerly and says why
            self.failed = f"capture failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            log.warning(fallback_line(self.failed))
            return
        self.graph = graph
        graph.replay()
        log.info("--cuda-graph: the training step is captured after %d eager steps and replayed from here on",
                 self.eager_steps)


def to_device(batch: tuple, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """A loader batch's (images, target) on DEVICE, as the static buffers hold them: the device backend's
    encoded JPEGs decoded (outside the graph: nvJPEG's calls are not capturable), uint8 kept as it is (the
    normalisation is part of the captured step)."""
    images, target = batch[0], batch[1]
    if hasattr(images, "decode"):  # hpc_imagenet.imagenet.data.decode.device's EncodedBatch
        images = images.decode(device)
    return images.to(device, non_blocking=True), target.to(device, non_blocking=True)


def tensor_lr(optimizer: torch.optim.Optimizer) -> None:
    """Make each group's learning rate a device tensor, so the captured step reads the value the scheduler
    writes into it (torch's schedulers fill a tensor learning rate in place) instead of a constant."""
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], torch.Tensor):
            device = group["params"][0].device
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
