"""The engine's data path as a LightningDataModule (the ``lightning`` extra):

    data = ImageNetDataModule("/data/imagenet", batch_size=64, image_size=224, workers=8)
    trainer = L.Trainer(..., use_distributed_sampler=False)   # the module shards by rank itself
    trainer.fit(model, datamodule=data)

Each rank gets its share of the batches from :func:`.library.image_loaders` (the engine's samplers, decoders and
per-sample augmentation seeds; Lightning sets each epoch's seeds through the sampler's ``set_epoch``), as uint8;
they are normalised after Lightning has moved them to the device (``on_after_batch_transfer``), as the engine
does. Lightning's own sampler injection would shard the validation set a second time, so a distributed trainer
that keeps it is refused in one line. A run resumed from a checkpoint saved in mid-epoch (the requeue callback's)
goes on at the next batch of that epoch, where each batch is one optimizer step (no gradient accumulation) and
every epoch runs whole (no ``limit_train_batches``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import lightning.pytorch as pl

from hpc_imagenet.imagenet.data.library import ImageLoaders, image_loaders
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer


class ImageNetDataModule(pl.LightningDataModule):
    """ROOT's train/ and val/ (ImageFolder or shards) through the engine's loaders; BATCH_SIZE per process."""

    def __init__(self, root: Union[str, Path], batch_size: int, image_size: int = 224, workers: int = 4,
                 backend: str = "fast", seed: Optional[int] = 0, channels_last: bool = False,
                 flags: Sequence[str] = ()) -> None:
        super().__init__()
        self.root, self.batch_size, self.image_size, self.workers = root, batch_size, image_size, workers
        self.backend, self.seed, self.channels_last, self.flags = backend, seed, channels_last, list(flags)
        self.loaders: Optional[ImageLoaders] = None
        self._normalisers = {}

    def setup(self, stage: str) -> None:
        if self.loaders is not None:
            return
        trainer = self.trainer
        if trainer.world_size > 1 and getattr(trainer._accelerator_connector, "use_distributed_sampler", False):
            raise ValueError("ImageNetDataModule shards its batches by rank itself: create the Trainer with "
                             "use_distributed_sampler=False")
        self.loaders = image_loaders(self.root, batch_size=self.batch_size, image_size=self.image_size,
                                     workers=self.workers, backend=self.backend, seed=self.seed, device="cpu",
                                     rank=trainer.global_rank, world_size=trainer.world_size, flags=self.flags)

    @property
    def num_classes(self) -> int:
        return self.loaders.num_classes

    def train_dataloader(self):
        # Lightning restores its loops before it asks for the loaders: a run resumed in mid-epoch goes on at the
        # batch after its checkpoint's last optimizer step (one step a batch, every epoch whole)
        trainer, per_epoch = self.trainer, len(self.loaders.train_batches)
        done = min(max(trainer.global_step - trainer.current_epoch * per_epoch, 0), per_epoch)
        self.loaders.set_epoch(trainer.current_epoch, samples_done=done * self.batch_size)
        return self.loaders.train_batches

    def val_dataloader(self):
        return self.loaders.val_batches

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        images, target = batch
        device = images.device
        if device not in self._normalisers:
            # a fresh tensor a batch: callbacks and loggers may keep one
            self._normalisers[device] = DeviceNormalizer(device, self.channels_last, reuse=False)
        return self._normalisers[device](images), target
