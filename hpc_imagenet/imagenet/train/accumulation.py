"""Gradient accumulation: one optimizer step over several micro-batches per process.

A global batch of ``batch x processes x steps`` on fewer GPUs: each micro-batch's loss is divided
by ``steps`` and its gradients add up in ``.grad``; under DDP all but the last backward run inside
``no_sync()``, so the gradients are all-reduced once per optimizer step, not once per micro-batch.

What is exact and what is not: for a model without BatchNorm the gradient equals the large batch's
(the micro-batches are equal in size: the training loader drops its short last batch). With
BatchNorm, each micro-batch is normalised by its own statistics (``batch`` images per process,
exactly as on ``steps`` times more GPUs without SyncBatchNorm), but (1) the running mean and
variance are updated once per micro-batch, ``steps`` times per optimizer step, so they follow the
weights of the last micro-batches more closely than one update per step would, and (2) with
``--sync-bn`` the statistics are shared across the processes' current micro-batches
(``batch x processes`` images), never across the whole global batch.
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Sequence, Tuple

import torch


def sync_contexts(model: torch.nn.Module, steps: int) -> Sequence[ContextManager]:
    """One context per micro-batch: DDP's no_sync() for all but the last (a compiled DDP model too)."""
    ddp = getattr(model, "_orig_mod", model)  # torch.compile's wrapper keeps the module here
    if steps == 1 or not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        return [contextlib.nullcontext() for _ in range(steps)]
    return [ddp.no_sync() for _ in range(steps - 1)] + [contextlib.nullcontext()]


def accumulate(model: torch.nn.Module, batches: Sequence[Tuple[torch.Tensor, torch.Tensor]],
               forward_loss: Callable, backward: Callable[[torch.Tensor], None]) -> list:
    """Forward and backward each (images, target) of BATCHES; the loss of each is divided by their
    number before BACKWARD. FORWARD_LOSS(images, target) -> (loss, output, target) is called inside
    the micro-batch's sync context; returns those triples, with the undivided losses."""
    results = []
    for (images, target), context in zip(batches, sync_contexts(model, len(batches))):
        with context:
            loss, output, target = forward_loss(images, target)
            backward(loss / len(batches) if len(batches) > 1 else loss)
        results.append((loss, output, target))
    return results
