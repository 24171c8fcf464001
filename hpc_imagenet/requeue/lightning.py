"""The requeue contract for a PyTorch Lightning script: a callback for srun and torchrun, which needs nothing on
the rank beyond Lightning (no ``scontrol``, as in a container image; the ``lightning`` extra).

    trainer = L.Trainer(..., callbacks=[Requeue()])
    trainer.fit(model, data, ckpt_path=Requeue.resume_from())

The stop signal only sets a flag (the runner's, in place before the script's imports). At each batch end every
rank agrees through the strategy (one all-reduce), the trainer writes its checkpoint (Lightning's own: model,
optimizers, loops) into the run folder atomically, outside any signal handler, and stops; the runner then ends
the process with 75 and the batch file requeues the job from the host. What it does that Lightning does not:
Lightning requeues only under srun (SLURMEnvironment; under torchrun it installs no requeue handler), skips its
handler when one is already installed, saves inside the signal handler (where the save may never complete) and
runs ``scontrol`` on the rank, which container images usually lack.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from hpc_imagenet import requeue
from hpc_imagenet.imagenet.common import files


class Requeue(pl.Callback):
    """Checkpoint and stop at the first batch end after a stop request (every EVERY_N_STEPS optimizer steps); each
    batch's images go to the step log the scaling harness reads (requeue.step_done): the first tensor's length in
    the batch times the ranks, or IMAGES_PER_BATCH (all ranks together) where the batch is shaped otherwise."""

    def __init__(self, every_n_steps: int = 1, images_per_batch: Optional[int] = None) -> None:
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be at least 1 (got {every_n_steps})")
        self.every_n_steps, self.images_per_batch = every_n_steps, images_per_batch
        requeue.listen()  # a script run without the runner still listens from here on

    @staticmethod
    def resume_from() -> Optional[str]:
        """The checkpoint for ``trainer.fit(ckpt_path=...)``: the run folder's newest, None on the first start."""
        path = requeue.latest()
        return str(path) if path is not None else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if trainer.is_global_zero:
            requeue.step_done(self.images_per_batch or _batch_size(batch) * trainer.world_size)
        if trainer.global_step % self.every_n_steps:
            return
        if not trainer.strategy.reduce_boolean_decision(requeue.stop_requested(), all=False):
            return
        self._save(trainer)
        requeue.mark_stopped()
        trainer.should_stop = True

    @staticmethod
    def _save(trainer: pl.Trainer) -> None:
        """Lightning's checkpoint as run_dir()/checkpoint.pth.tar, whole or not at all."""
        path = requeue.run_dir() / requeue.CHECKPOINT
        partial = path.with_name(f".{path.name}.partial")
        trainer.save_checkpoint(partial)  # every rank calls it; the strategy writes from rank 0
        if trainer.is_global_zero:
            os.replace(partial, path)
            files.fsync_dir(path.parent)
        trainer.strategy.barrier("hpc_imagenet.requeue")


def _batch_size(batch: Any) -> int:
    """The length of the batch's first tensor (images, labels), else 0: a step log without images still times the
    steps."""
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return len(batch) if isinstance(batch, torch.Tensor) and batch.dim() > 0 else 0
