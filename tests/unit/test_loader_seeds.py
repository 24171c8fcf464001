"""Seeded loaders: each sample's augmentation comes from its own seed, so workers can persist.

Checked on the real loaders of build_loaders (real JPEGs, real worker processes): a seeded run's
batches are the same with 0 or 2 loader workers for every per-sample backend; a loader resumed
part-way into an epoch yields the rest of that epoch's batches exactly; the seeds depend on the run
seed, the epoch and the index only; the loader leaves the training process's random stream alone.
"""
from __future__ import annotations

import pytest
import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import samplers
from hpc_imagenet.imagenet.data.loader import build_loaders, set_epoch
from hpc_imagenet.imagenet.data.decode import device


def _loaders(root, backend: str, workers: int):
    cfg = config.parse([str(root), "--seed", "3", "--workers", str(workers), "-b", "8", "--image-size", "24",
                        "--data-backend", backend], variant="nd")
    train, _, _ = build_loaders(cfg, 0, 1, torch.device("cpu"))
    return train


def _epoch(loader, epoch: int, samples_done: int = 0) -> list:
    """The epoch's batches as plain tensors (an encoded batch of the device backend: its crop boxes)."""
    set_epoch(loader, epoch, samples_done)
    out = []
    for images, target in loader:
        if isinstance(images, device.EncodedBatch):
            images = images.boxes
        out.append((images, target))
    return out


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) and torch.equal(s, t) for (x, s), (y, t) in zip(a, b))


@pytest.mark.parametrize("backend", ["fast", "baseline", "pil", "device"])
def test_seeded_batches_do_not_depend_on_the_number_of_loader_workers(jpeg_data, backend):
    inline, workers = _loaders(jpeg_data, backend, 0), _loaders(jpeg_data, backend, 2)
    for epoch in (0, 1):
        assert _same(_epoch(inline, epoch), _epoch(workers, epoch)), f"{backend}, epoch {epoch}"


def test_a_loader_resumed_mid_epoch_yields_the_rest_of_the_epoch(jpeg_data):
    straight = _loaders(jpeg_data, "fast", 2)
    _epoch(straight, 0)  # persistent workers that have already served an epoch
    whole = _epoch(straight, 1)
    resumed = _epoch(_loaders(jpeg_data, "fast", 2), 1, samples_done=2 * 8)
    assert _same(resumed, whole[2:])


def test_sample_seeds_depend_on_seed_epoch_and_index_only():
    a = samplers.sample_seeds(3, 1, 100)
    assert (a[:40] == samplers.sample_seeds(3, 1, 40)).all()  # not on the dataset length
    assert (a != samplers.sample_seeds(3, 2, 100)).mean() > 0.9 and (a != samplers.sample_seeds(4, 1, 100)).mean() > 0.9
    ranks = [samplers.ResumableSampler(range(100), num_replicas=2, rank=r, seed=3, seeded=True) for r in (0, 1)]
    for sampler in ranks:
        sampler.set_epoch(1)
        assert all(seed == a[index] for index, seed in sampler)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_seeded_loader_leaves_the_training_process_random_stream_alone(jpeg_data, workers):
    """Dropout and anything else drawing in the training process stay exact across a resume, which
    starts a new loader iterator where an uninterrupted run does not."""
    before = torch.get_rng_state()
    loader = _loaders(jpeg_data, "fast", workers)
    _epoch(loader, 0)
    _epoch(loader, 1, samples_done=8)
    assert torch.equal(torch.get_rng_state(), before)
