"""One optimizer step: forward and loss, backward, the optimizer and the schedule, eager or replayed.

The loop (hpc_imagenet.imagenet.train.trainer) hands a step its batches and reads back (loss, output, target)
per micro-batch; what the step does in between (accumulation, --cuda-graph's replay, the EMA update)
stays here. Nothing in a step reads a value back to the host.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from hpc_imagenet.imagenet.train import cuda_graph
from hpc_imagenet.imagenet.train.accumulation import accumulate


class Stepper:
    """The step of one run over PARTS (hpc_imagenet.imagenet.train.trainer.Parts) on INFO's device."""

    def __init__(self, cfg, info, parts, console):
        self.cfg, self.info, self.p, self.console = cfg, info, parts, console
        self.graph_step = self._graph_step() if cfg.perf.cuda_graph else None

    def forward_loss(self, images: torch.Tensor, target: torch.Tensor):
        p = self.p
        images = p.precision.cast_input(p.normalizer(images))
        target = target.to(self.info.device, non_blocking=True)
        if p.mix is not None:
            images, target = p.mix(images, target)  # soft labels from here on
        with p.precision.autocast():
            output = p.model(images)
        return p.criterion(output.float(), target), output, target

    def _graph_step(self) -> Optional[cuda_graph.GraphStep]:
        """--cuda-graph's replayed step, or None (eager) with one line saying why the run does not allow it."""
        p = self.p
        why = cuda_graph.why_not(self.cfg, self.info.device, self.info.world_size, self.cfg.optim.opt,
                                 p.precision.spec.loss_scale, bool(p.optimizer.defaults.get("fused")))
        if why:
            self.console.warn(cuda_graph.fallback_line(why))
            return None
        return cuda_graph.GraphStep(self._whole_step, lambda batch: cuda_graph.to_device(batch, self.info.device),
                                    p.optimizer)

    def _whole_step(self, images: torch.Tensor, target: torch.Tensor) -> tuple:
        """Zero the gradients, forward, backward and step on one batch: what --cuda-graph captures."""
        p = self.p
        p.precision.zero_grad(p.optimizer)
        loss, output, target = self.forward_loss(images, target)
        p.precision.backward(loss, p.optimizer)
        p.precision.step(p.optimizer)
        return loss, output, target

    def step(self, batches: List[tuple]) -> List[tuple]:
        """One optimizer step over BATCHES (micro-batches when accumulating); their (loss, output,
        target) triples."""
        p = self.p
        if self.graph_step is not None:
            results = self.graph_step(batches[0])
        else:
            p.precision.zero_grad(p.optimizer)
            results = accumulate(p.model, batches, self.forward_loss,
                                 lambda loss: p.precision.backward(loss, p.optimizer))
            p.precision.step(p.optimizer)
        p.scheduler.step()
        if p.ema is not None:
            p.ema.after_step(p.raw_model, p.scheduler.last_epoch - 1)  # the global step just taken
        return results
