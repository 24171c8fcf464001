"""Step 4 of the data flow: datasets and loaders (source + sampler + decode backend -> batches).

:func:`build_loaders` scans the dataset (:mod:`.scan`), makes the samplers (:mod:`.samplers`) and
hands them to the backend ``--data-backend`` names (:mod:`.decode`): a per-sample backend runs in
DataLoader workers over :class:`ImageFiles`; a batch backend (dali) builds its own loaders.
Images leave the loader as uint8 CHW tensors; :mod:`.normalize` normalises them on the device.

Bad data is reported as :class:`DataError` with one line naming the file or folder and the fix.
A corrupt or unreadable image stops the run (naming the file) unless ``--skip-bad-images`` is
given, in which case it is replaced by the next readable image and counted in a warning.
"""
from __future__ import annotations

import logging
import functools
import multiprocessing
import sys
from typing import Callable, Dict, Iterator, Optional, Protocol, Sequence, Tuple, Union

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import decode, sources
from hpc_imagenet.imagenet.data.decode.augment import Augmentation
from hpc_imagenet.imagenet.data.decode.base import Transform
from hpc_imagenet.imagenet.data.decode.device import collate
from hpc_imagenet.imagenet.data.samplers import RepeatedAugmentationSampler, ResumableSampler, ShardSampler
from hpc_imagenet.imagenet.data.scan import scan_dataset_once

log = logging.getLogger(__name__)


class Batches(Protocol):
    """What every backend's loader is to the trainer: (images, target) batches, and their count."""

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]: ...

    def __len__(self) -> int: ...


# ---------------------------------------------------------------- datasets

class ImageFiles(Dataset):
    """Samples of a source (ImageFolder or shards) decoded by a backend transform from their bytes.

    The dataset reads the bytes (an open() per image for folders, a pread on a shard opened once per
    worker for shards); the backend only decodes bytes, so every backend works on every source.

    An item is an index, or (index, seed) from a seeded :class:`ResumableSampler`: then the sample's
    augmentation is drawn from torch's CPU generator seeded with that seed (every backend draws its
    crop and flip there), and the generator's state is restored afterwards. Why per sample: the draws
    then depend on the run seed, the epoch and the index only, not on which worker decodes the
    sample or what it decoded before, so a resumed run draws what an uninterrupted one does while
    loader workers (and the shard files they hold open) persist across epochs.

    An item (index, seed or None, size) asks for the sample at another training crop size
    (progressive resizing): RESIZED(size) makes that transform, once per size and worker.
    """

    def __init__(self, source: "sources.FolderIndex | sources.ShardIndex | Sequence[Tuple[str, int]]",
                 transform: Transform, skip_bad: bool = False, resized: Optional[Callable[[int], Transform]] = None):
        self.source = source if hasattr(source, "read") else sources.FolderIndex.from_samples(source)
        self.transform = transform
        self.skip_bad = skip_bad
        self.skipped = 0
        self.resized = resized
        self.by_size: Dict[int, Transform] = {}

    def _transform(self, size: Optional[int]) -> Transform:
        if size is None or self.resized is None:
            return self.transform
        if size not in self.by_size:
            self.by_size[size] = self.resized(size)
        return self.by_size[size]

    def __len__(self) -> int:
        return len(self.source)

    def _load(self, index: int, transform: Transform) -> Tuple[torch.Tensor, int]:
        try:
            return transform(self.source.read(index), self.source.name(index)), self.source.target(index)
        except (OSError, ValueError, SyntaxError) as e:  # PIL raises all three for broken files
            name = self.source.name(index)
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            if not self.skip_bad:
                raise DataError(f"cannot read image {name}: {reason}; replace or remove the file, or pass "
                                "--skip-bad-images to skip such files") from None
            self.skipped += 1
            log.warning("skipping unreadable image %s (%s); %d skipped in this worker", name, reason,
                        self.skipped)
            return None  # type: ignore[return-value]

    def __getitem__(self, item: Union[int, tuple]) -> Tuple[torch.Tensor, int]:
        if not isinstance(item, tuple):
            return self._first_readable(item, self.transform)
        index, seed, *size = item
        transform = self._transform(size[0] if size else None)
        if seed is None:
            return self._first_readable(index, transform)
        with torch.random.fork_rng(devices=[]):  # the CPU generator only; restored on exit
            torch.default_generator.manual_seed(seed)
            return self._first_readable(index, transform)

    def _first_readable(self, index: int, transform: Transform) -> Tuple[torch.Tensor, int]:
        for offset in range(len(self)):
            item = self._load((index + offset) % len(self), transform)
            if item is not None:
                return item
        raise DataError("no image in the dataset could be read; check the files and their permissions")


class SyntheticBatches:
    """The same random batch, already on the device, ``steps`` times: compute-only benchmarking."""

    def __init__(self, steps: int, batch_size: int, image_size: int, num_classes: int, device: torch.device):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (batch_size, 3, image_size, image_size), dtype=torch.uint8,
                                    generator=g).to(device)
        self.targets = torch.randint(0, num_classes, (batch_size,), generator=g).to(device)
        self.steps = steps
        self.sampler = None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(self.steps):
            yield self.images, self.targets


# ---------------------------------------------------------------- loaders

def _loader(dataset: Dataset, sampler: Sampler, batch_size: int, workers: int, pin: bool, drop_last: bool,
            seed: Optional[int]) -> DataLoader:
    """Workers persist across epochs, keeping their shard files open: seeded augmentation comes with
    each sample from the sampler, not from the workers' random state. A seeded run's loader draws its
    workers' base seed from its own generator: from the global one, a resumed run (which starts a new
    loader iterator) would leave the training process's stream (dropout) one draw off."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      pin_memory=pin, drop_last=drop_last, generator=generator, collate_fn=collate,
                      persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else None,
                      multiprocessing_context=worker_start_method() if workers > 0 else None)


def worker_start_method() -> Optional[str]:
    """How loader workers start: as under torchrun everywhere on Linux, forked from their rank.

    pytorch/examples' ``--dist-url`` launch spawns its ranks, and a spawned process inherits the start
    method "spawn": each loader worker would then be a fresh interpreter importing torch, torchvision,
    the engine and the entry script again (about 4 CPU seconds and a few hundred MB a worker, for every
    worker of every rank, train and validation loaders alike). Forked, they start at once and share the
    rank's memory, as torchrun's ranks' workers do. Elsewhere (macOS, Windows) the platform's own
    default stays."""
    if sys.platform.startswith("linux") and multiprocessing.get_start_method(allow_none=True) == "spawn":
        return "fork"
    return None


def build_loaders(cfg, rank: int, world_size: int, device: torch.device) -> Tuple[Batches, Batches, int]:
    """(train_loader, val_loader, num_classes) for the settings (their data section, seed and resolved
    batch); loaders shard by rank over WORLD_SIZE processes."""
    data, batch, seed = cfg.data, cfg.batch, cfg.run.seed
    if data.dummy:
        steps = max(1, data.dummy_size // batch.global_batch) * batch.accum_steps  # micro-batches
        val_steps = max(1, steps // 25)
        make = lambda n: SyntheticBatches(n, batch.per_process, data.image_size, data.num_classes, device)  # noqa: E731
        return make(steps), make(val_steps), data.num_classes
    classes, samples = scan_dataset_once(data.root, rank)
    if len(samples["train"]) < batch.global_batch:
        raise DataError(f"{data.root}/train has {len(samples['train'])} images, fewer than one global batch "
                        f"({batch.per_process} x {world_size} processes); lower -b")
    backend = decode.get_backend(data.data_backend)
    seeded = seed is not None and backend.per_sample  # a batch backend draws from its own seeded generator
    train_sampler = _train_sampler(data, len(samples["train"]), rank, world_size, seed, seeded)
    val_sampler = ShardSampler(len(samples["val"]), rank, world_size)
    if backend.per_sample:
        train, val = _sample_loaders(cfg, backend, samples, train_sampler, val_sampler, device)
    else:
        train, val = backend.loaders(cfg, samples, train_sampler, val_sampler, rank, device)
    return train, val, len(classes)


def _train_sampler(data, length: int, rank: int, world_size: int, seed: Optional[int],
                   seeded: bool) -> ResumableSampler:
    """The training sampler: every image once an epoch, or --ra-reps times with --ra-sampler."""
    if data.ra_sampler:
        return RepeatedAugmentationSampler(range(length), num_replicas=world_size, rank=rank, shuffle=True,
                                           seed=seed or 0, seeded=seeded, repetitions=data.ra_reps)
    return ResumableSampler(range(length), num_replicas=world_size, rank=rank, shuffle=True, seed=seed or 0,
                            drop_last=False, seeded=seeded)


def _sample_loaders(cfg, backend: decode.Backend, samples, train_sampler, val_sampler, device: torch.device):
    """DataLoaders over :class:`ImageFiles` decoded by a per-sample backend."""
    data, batch = cfg.data, cfg.batch
    augment = Augmentation.of(data)
    train_set = ImageFiles(samples["train"], backend.transform(True, data.image_size, None, data.train_crop_scale,
                                                               augment),
                           data.skip_bad_images, resized=functools.partial(backend.transform, True, resize_size=None,
                                                                           crop_scale=data.train_crop_scale,
                                                                           augment=augment))
    val_set = ImageFiles(samples["val"], backend.transform(False, val_crop_size(data), data.val_resize_size,
                                                           augment=Augmentation.for_val(data)),
                         data.skip_bad_images)
    pin = device.type == "cuda"
    return (_loader(train_set, train_sampler, batch.per_process, batch.workers, pin, True, cfg.run.seed),
            _loader(val_set, val_sampler, batch.per_process, batch.workers, pin, False, cfg.run.seed))


def set_epoch(loader, epoch: int, samples_done: int = 0, resolution: Optional[int] = None) -> None:
    """Prepare the train loader for EPOCH (shuffle order and augmentation seeds, mid-epoch start, and
    the training crop size where progressive resizing sets one)."""
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, ResumableSampler):
        sampler.set_epoch(epoch)
        sampler.set_start(samples_done)
        sampler.set_resolution(resolution)


def val_crop_size(data) -> int:
    """--val-crop-size, else the training --image-size (pytorch/examples: both 224); DATA: the data section."""
    return data.val_crop_size or data.image_size
