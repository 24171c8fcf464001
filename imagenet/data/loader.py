"""Datasets, samplers and loaders: ImageFolder JPEGs, synthetic tensors, and their checks.

Images leave the loader as uint8 CHW tensors; the engine normalises them on the device, so worker
pipes and host-to-device copies carry a quarter of the bytes of float tensors. Decoding pipelines
("backends") are registered by name in :data:`BACKENDS`; ``--data-backend`` picks one.

Bad data is reported as :class:`DataError` with one line naming the file or folder and the fix.
A corrupt or unreadable image stops the run (naming the file) unless ``--skip-bad-images`` is
given, in which case it is replaced by the next readable image and counted in a warning.
"""
from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.transforms import v2 as T

from . import device_decode, distributed, pipelines, sources
from .errors import DataError, one_line
from .pipelines import IMAGENET_MEAN, IMAGENET_STD, val_resize  # noqa: F401 (defined with the backends)

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


# ---------------------------------------------------------------- decoding backends

class _PilTransform:
    """bytes -> ops(RGB PIL image); a class so spawned workers can pickle it."""

    def __init__(self, ops: Callable):
        self.ops = ops

    def __call__(self, data: bytes, name: str = "") -> torch.Tensor:
        return self.ops(pipelines.pil_rgb(data))


def pil_backend(train: bool, image_size: int) -> pipelines.Transform:
    """PIL decode + torchvision v2 transforms, producing uint8 CHW tensors."""
    if train:
        ops = T.Compose([T.RandomResizedCrop(image_size, antialias=True), T.RandomHorizontalFlip(),
                         T.PILToTensor()])
    else:
        ops = T.Compose([T.Resize(val_resize(image_size), antialias=True), T.CenterCrop(image_size),
                         T.PILToTensor()])
    return _PilTransform(ops)


# baseline (pytorch/examples, float) and fast (decode only what the crop needs) live in pipelines.
# dali is not a per-sample transform: build_loaders hands the samples to imagenet.dali_backend instead.
BACKENDS: Dict[str, Callable[[bool, int], pipelines.Transform]] = {"pil": pil_backend,
                                                                            **pipelines.BACKENDS,
                                                                            "device": device_decode.device_backend}


def get_backend(name: str) -> Callable[[bool, int], pipelines.Transform]:
    if name not in BACKENDS:
        raise DataError(f"unknown --data-backend {name!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]


# ---------------------------------------------------------------- folder scanning and checks

def _classes(split_dir: Path) -> List[str]:
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))


def _scan(split_dir: Path, classes: Sequence[str]) -> sources.FolderIndex:
    samples = []
    for index, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(split_dir / name, followlinks=True)):
            samples.extend((os.path.join(dirpath, f), index) for f in sorted(files)
                           if f.lower().endswith(IMAGE_EXTENSIONS))
    return sources.FolderIndex.from_samples(samples)  # the list of tuples is dropped here


Index = Dict[str, "sources.FolderIndex | sources.ShardIndex"]


def scan_dataset(root: str) -> Tuple[List[str], Index]:
    """Check ROOT and index its train and val samples; raise DataError on anything unusable.

    ROOT is an ImageFolder (train/ and val/ of class folders) or a shard folder written by
    ``python -m imagenet.shards`` (recognised by its index file).
    """
    base = Path(root)
    if not base.is_dir():
        raise DataError(f"dataset directory {root} does not exist; pass the folder holding train/ and val/ "
                        "(or use --dummy)")
    if sources.is_shard_folder(root):
        return sources.load_index(root)
    split_classes = {}
    for split in ("train", "val"):
        d = base / split
        if not d.is_dir():
            raise DataError(f"{d} is missing: the dataset root needs train/ and val/ ImageFolders "
                            "(class sub-folders of images); for ImageNet's val, sort images into class folders")
        if not os.access(d, os.R_OK | os.X_OK):
            raise DataError(f"{d} is not readable by this user; fix its permissions")
        split_classes[split] = _classes(d)
        if not split_classes[split]:
            raise DataError(f"{d} has no class folders: put each class's images in {d}/<class_name>/")
    train_c, val_c = split_classes["train"], split_classes["val"]
    if train_c != val_c:
        only_train = sorted(set(train_c) - set(val_c))[:3]
        only_val = sorted(set(val_c) - set(train_c))[:3]
        raise DataError(f"train/ and val/ have different class folders (only in train: {only_train}, only in "
                        f"val: {only_val}); both splits need the same classes")
    samples = {}
    for split in ("train", "val"):
        samples[split] = _scan(base / split, train_c)
        if not len(samples[split]):
            raise DataError(f"{base / split} has class folders but no images ({', '.join(IMAGE_EXTENSIONS)})")
    return train_c, samples


def scan_dataset_once(root: str, rank: int) -> Tuple[List[str], Index]:
    """scan_dataset on global rank 0 only; every rank gets rank 0's result, or raises rank 0's error.

    Each rank walking the tree is N metadata scans of ~1.3M files on a shared filesystem (Lustre,
    GPFS) at start-up; one is enough. The index is numpy arrays, so the broadcast pickles a few
    buffers, not millions of tuples. A failed scan is broadcast instead of the result, so every rank
    stops with the same DataError line rather than waiting on a broadcast that never comes. With
    nccl the pickled lists travel through the current CUDA device, set by distributed.pick_device.
    """
    if not distributed.initialized():
        return scan_dataset(root)
    outcome, failure = None, None
    if rank == 0:
        try:
            outcome = scan_dataset(root)
        except Exception as e:  # the other ranks are waiting in the broadcast below: send them the failure
            failure = e
            outcome = (DataError(str(e)) if isinstance(e, DataError)
                       else RuntimeError(f"rank 0 could not scan {root}: {type(e).__name__}: {one_line(e)}"))
    root0, outcome = distributed.broadcast_object((root, outcome))
    if failure is not None:
        raise failure
    if isinstance(outcome, Exception):
        raise outcome
    return _rebased(outcome, root0, root)


def _rebased(scan, old_root: str, new_root: str):
    """Rank 0's index reading under this rank's ROOT: with --stage-dir each node reads its own copy,
    whose path may differ from rank 0's ('/local/$SLURMD_NODENAME')."""
    old, new = str(Path(old_root)), str(Path(new_root))
    if old == new:
        return scan
    classes, splits = scan
    return classes, {split: _moved(index, old, new) for split, index in splits.items()}


def _moved(index, old: str, new: str):
    moved = copy.copy(index)
    attr = "prefix" if index.kind == "folder" else "root"  # FolderIndex's common folder, ShardIndex's folder
    setattr(moved, attr, new + getattr(index, attr)[len(old):])
    return moved


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
    """

    def __init__(self, source: "sources.FolderIndex | sources.ShardIndex | Sequence[Tuple[str, int]]",
                 transform: pipelines.Transform, skip_bad: bool = False):
        self.source = source if hasattr(source, "read") else sources.FolderIndex.from_samples(source)
        self.transform = transform
        self.skip_bad = skip_bad
        self.skipped = 0

    def __len__(self) -> int:
        return len(self.source)

    def _load(self, index: int) -> Tuple[torch.Tensor, int]:
        try:
            return self.transform(self.source.read(index), self.source.name(index)), self.source.target(index)
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

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> Tuple[torch.Tensor, int]:
        if not isinstance(item, tuple):
            return self._first_readable(item)
        index, seed = item
        with torch.random.fork_rng(devices=[]):  # the CPU generator only; restored on exit
            torch.default_generator.manual_seed(seed)
            return self._first_readable(index)

    def _first_readable(self, index: int) -> Tuple[torch.Tensor, int]:
        for offset in range(len(self)):
            item = self._load((index + offset) % len(self))
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


# ---------------------------------------------------------------- samplers

def sample_seeds(seed: int, epoch: int, length: int) -> np.ndarray:
    """One 32-bit augmentation seed per dataset index for EPOCH of a run seeded with SEED.

    A SeedSequence hashes (seed, epoch) into a stream of well-mixed words, the same for any LENGTH's
    prefix; nearby seeds would give torch's Mersenne Twister correlated first draws. ~90 ms per
    epoch for ImageNet's 1.28M samples, once per epoch, in the main process.
    """
    return np.random.SeedSequence((seed % 2**64, epoch)).generate_state(length)


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch part-way, to resume a preempted epoch exactly.

    With ``seeded=True`` it yields (index, augmentation seed) pairs for :class:`ImageFiles`
    (:func:`sample_seeds`: a function of the run seed, the epoch and the index, not of the rank, the
    world size or the loader workers). The padding DistributedSampler adds to even out ranks
    repeats an index, and so its augmentation.
    """

    def __init__(self, *args, seeded: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeded = seeded
        self.start_index = 0

    def set_start(self, samples_done: int) -> None:
        self.start_index = samples_done  # applies to the next iteration only

    def __iter__(self) -> Iterator[Union[int, Tuple[int, int]]]:
        indices = list(super().__iter__())[self.start_index:]
        self.start_index = 0
        if not self.seeded:
            return iter(indices)
        seeds = sample_seeds(self.seed, self.epoch, len(self.dataset))
        return zip(indices, seeds[indices].tolist())


class ShardSampler(Sampler):
    """Every index exactly once across ranks, no padding: exact validation, the tail included."""

    def __init__(self, length: int, rank: int, world_size: int):
        self.indices = list(range(rank, length, world_size))

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


# ---------------------------------------------------------------- loaders

def _loader(dataset: Dataset, sampler: Sampler, batch_size: int, workers: int, pin: bool, drop_last: bool,
            seed: Optional[int]) -> DataLoader:
    """Workers persist across epochs, keeping their shard files open: seeded augmentation comes with
    each sample from the sampler, not from the workers' random state. A seeded run's loader draws its
    workers' base seed from its own generator: from the global one, a resumed run (which starts a new
    loader iterator) would leave the training process's stream (dropout) one draw off."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                      pin_memory=pin, drop_last=drop_last, generator=generator, collate_fn=device_decode.collate,
                      persistent_workers=workers > 0, prefetch_factor=4 if workers > 0 else None)


def build_loaders(cfg, rank: int, world_size: int, device: torch.device):
    """(train_loader, val_loader, num_classes) for the config; loaders shard by rank."""
    if cfg.dummy:
        steps = max(1, cfg.dummy_size // (cfg.batch_size * world_size))
        val_steps = max(1, steps // 25)
        make = lambda n: SyntheticBatches(n, cfg.batch_size, cfg.image_size, cfg.num_classes, device)  # noqa: E731
        return make(steps), make(val_steps), cfg.num_classes
    classes, samples = scan_dataset_once(cfg.data, rank)
    if len(samples["train"]) < cfg.batch_size * world_size:
        raise DataError(f"{cfg.data}/train has {len(samples['train'])} images, fewer than one global batch "
                        f"({cfg.batch_size} x {world_size} processes); lower -b")
    seeded = cfg.seed is not None and cfg.data_backend != "dali"  # dali draws from its own seeded generator
    train_sampler = ResumableSampler(range(len(samples["train"])), num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=cfg.seed or 0, drop_last=False, seeded=seeded)
    val_sampler = ShardSampler(len(samples["val"]), rank, world_size)
    if cfg.data_backend == "dali":
        return (*_dali_loaders(cfg, samples, train_sampler, val_sampler, rank, device), len(classes))
    backend = get_backend(cfg.data_backend)
    train_set = ImageFiles(samples["train"], backend(True, cfg.image_size), cfg.skip_bad_images)
    val_set = ImageFiles(samples["val"], backend(False, cfg.image_size), cfg.skip_bad_images)
    pin = device.type == "cuda"
    train = _loader(train_set, train_sampler, cfg.batch_size, cfg.workers, pin, True, cfg.seed)
    val = _loader(val_set, val_sampler, cfg.batch_size, cfg.workers, pin, False, cfg.seed)
    return train, val, len(classes)


def _dali_loaders(cfg, samples, train_sampler, val_sampler, rank: int, device: torch.device):
    """Train and val loaders of the dali backend, over the same samplers as the other backends."""
    from . import dali_backend

    try:
        dali_backend.require_dali()
    except dali_backend.DaliUnavailable as e:
        raise DataError(str(e)) from None
    if cfg.skip_bad_images:
        raise DataError("--skip-bad-images does not work with --data-backend dali (DALI decodes whole batches); "
                        "use --data-backend fast to find and skip bad files")
    make = lambda split, sampler, train, max_batches: dali_backend.DaliLoader(  # noqa: E731
        dali_backend.FileReader(samples[split]), sampler, cfg.batch_size, train, cfg.image_size, device,
        cfg.workers, cfg.seed, rank, max_batches)
    return (make("train", train_sampler, True, cfg.steps_per_epoch),
            make("val", val_sampler, False, cfg.val_steps))


def set_epoch(loader, epoch: int, samples_done: int = 0) -> None:
    """Prepare the train loader for EPOCH (shuffle order and augmentation seeds, mid-epoch start)."""
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, ResumableSampler):
        sampler.set_epoch(epoch)
        sampler.set_start(samples_done)


class DeviceNormalizer:
    """uint8 NCHW batches -> normalised float on the device (float batches pass through; encoded
    batches of the device backend are decoded first)."""

    def __init__(self, device: torch.device, channels_last: bool):
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if isinstance(images, device_decode.EncodedBatch):  # the device backend: decode here
            images = images.decode(self.device)
        images = images.to(self.device, non_blocking=True)
        if images.dtype == torch.uint8:
            images = (images.float() - self.mean) / self.std
        return images.contiguous(memory_format=self.memory_format)
