"""The engine's data path for your own training script: the same datasets (ImageFolder, shards, a staged copy),
samplers and decoders as the four ImageNet scripts, as plain loaders.

    from hpc_imagenet.imagenet.data.library import image_loaders

    data = image_loaders("/data/imagenet", batch_size=64, image_size=224, workers=8)  # every rank calls it
    for epoch in range(epochs):
        data.set_epoch(epoch)                      # this epoch's shuffle and augmentation seeds
        for images, target in data.train:          # this rank's share, normalised float32 on data.device
            ...
        for images, target in data.val:            # every validation image once across the ranks

The settings go through the engine's own command-line checks (a bad value is one line naming the fix); more of
its data flags (``--train-crop-scale 0.35 1``, ``--auto-augment ta_wide``, ``--data-backend dali`` ...) pass
through ``flags``. Rank and world size come from torch.distributed when it is initialised, else from RANK and
WORLD_SIZE; rank 0 scans the dataset and the others receive its index (a collective: every rank calls this).
The loaders hand uint8 batches; ``data.train`` and ``data.val`` normalise them on the device as the engine does
(``data.train_batches`` and ``data.val_batches`` are the uint8 ones). :mod:`.lightning_data` wraps this as a
LightningDataModule.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple, Union

import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data.loader import Batches, build_loaders, set_epoch
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer


class Normalised:
    """BATCHES (uint8 images, labels) as normalised float images and labels on the normaliser's device."""

    def __init__(self, batches: Batches, normalise: DeviceNormalizer):
        self.batches, self.normalise = batches, normalise

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        for images, target in self.batches:
            yield self.normalise(images), target.to(self.normalise.device, non_blocking=True)


@dataclass
class ImageLoaders:
    """This rank's training and validation batches of one dataset."""
    train_batches: Batches  # uint8 NCHW images and int64 labels, as the loader hands them
    val_batches: Batches
    num_classes: int
    device: torch.device
    channels_last: bool = False

    def __post_init__(self) -> None:
        # a fresh tensor a batch: a user's loop may keep batches, which a reused buffer would overwrite
        self.normalise = DeviceNormalizer(self.device, self.channels_last, reuse=False)

    @property
    def train(self) -> Normalised:
        return Normalised(self.train_batches, self.normalise)

    @property
    def val(self) -> Normalised:
        return Normalised(self.val_batches, self.normalise)

    def set_epoch(self, epoch: int, samples_done: int = 0) -> None:
        """Shuffle order and augmentation seeds of EPOCH; SAMPLES_DONE of this rank's samples already trained
        (a resumed run starts part-way through the epoch)."""
        set_epoch(self.train_batches, epoch, samples_done)


def image_loaders(root: Union[str, Path], *, batch_size: int, image_size: int = 224, workers: int = 4,
                  backend: str = "fast", seed: Optional[int] = 0, device: Union[str, torch.device, None] = None,
                  rank: Optional[int] = None, world_size: Optional[int] = None, channels_last: bool = False,
                  flags: Sequence[str] = ()) -> ImageLoaders:
    """ROOT's train/ and val/ (or shards) as this rank's loaders; BATCH_SIZE per process. Raises
    hpc_imagenet.imagenet.config.ConfigError (one line) for a bad setting and DataError for bad data."""
    argv = [str(root), "-b", str(batch_size), "--image-size", str(image_size), "-j", str(workers),
            "--data-backend", backend, *(["--seed", str(seed)] if seed is not None else []), *flags]
    settings = config.parse(argv, "ddp", check_data=True, environ={})  # environ: -b is this process's batch
    rank, world_size = _place(rank, world_size)
    device = torch.device(device) if device is not None else _default_device()
    train, val, classes = build_loaders(settings, rank, world_size, device)
    return ImageLoaders(train, val, classes, device, channels_last)


def _place(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's, else RANK / WORLD_SIZE, else one process."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        found = dist.get_rank(), dist.get_world_size()
    else:
        found = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")
