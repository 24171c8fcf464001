"""Step 2 of the data flow: which sample indices each rank reads, in which order, with which seed.

Training shuffles per epoch and can start an epoch part-way (exact resume), each image once an
epoch or, with repeated augmentation, several times on different ranks; validation reads every
sample exactly once across ranks.
"""
from __future__ import annotations

import math
from typing import Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.utils.data import DistributedSampler, Sampler


def sample_seeds(seed: int, epoch: int, length: int) -> np.ndarray:
    """One 32-bit augmentation seed per dataset index for EPOCH of a run seeded with SEED.

    A SeedSequence hashes (seed, epoch) into a stream of well-mixed words, the same for any LENGTH's
    prefix; nearby seeds would give torch's Mersenne Twister correlated first draws. ~90 ms per
    epoch for ImageNet's 1.28M samples, once per epoch, in the main process.
    """
    return np.random.SeedSequence((seed % 2**64, epoch)).generate_state(length)


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch part-way, to resume a preempted epoch exactly.

    With ``seeded=True`` it yields (index, augmentation seed) pairs for :class:`.loader.ImageFiles`
    (:func:`sample_seeds`: a function of the run seed, the epoch and the index, not of the rank, the
    world size or the loader workers). The padding DistributedSampler adds to even out ranks
    repeats an index, and so its augmentation.

    With a resolution set (progressive resizing, :mod:`.resolution`) it yields (index, seed or None,
    training crop size) triples: the size travels with each sample to the loader workers, which
    persist across epochs and so never see an attribute changed in the training process.
    """

    def __init__(self, *args, seeded: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeded = seeded
        self.start_index = 0
        self.resolution: Optional[int] = None

    def set_start(self, samples_done: int) -> None:
        self.start_index = samples_done  # applies to the next iteration only

    def set_resolution(self, size: Optional[int]) -> None:
        """The training crop size of the coming epochs (None: the transform's own)."""
        self.resolution = size

    def order(self) -> Tuple[List[int], List[int]]:
        """This rank's dataset indices for the epoch, and each one's key into the epoch's seeds."""
        indices = list(super().__iter__())
        return indices, indices

    def seed_count(self) -> int:
        """How many augmentation seeds an epoch draws (one per key)."""
        return len(self.dataset)

    def __iter__(self) -> Iterator[Union[int, Tuple[int, int], Tuple[int, Optional[int], int]]]:
        indices, keys = self.order()
        indices, keys = indices[self.start_index:], keys[self.start_index:]
        self.start_index = 0
        seeds = sample_seeds(self.seed, self.epoch, self.seed_count())[keys].tolist() if self.seeded else None
        if self.resolution is not None:
            return zip(indices, seeds or [None] * len(indices), [self.resolution] * len(indices))
        return iter(indices) if seeds is None else zip(indices, seeds)


class RepeatedAugmentationSampler(ResumableSampler):
    """Repeated augmentation (Hoffer et al. 2020; the ``--ra-sampler`` of torchvision's reference and
    DeiT): each epoch's shuffled images each appear REPETITIONS times in a row, dealt round the ranks,
    so the copies of an image land on different ranks, each with its own augmentation seed (the key
    ``index x repetitions + copy``). Each rank reads one dataset's worth divided by the ranks, so an
    epoch costs what a plain one does; torchvision's sampler also rounds that down to a multiple of
    256 images, which would leave a small dataset nothing. Shuffling (torch.randperm seeded with
    seed + epoch, as torchvision's), the mid-epoch start and the seeds follow :class:`ResumableSampler`.
    """

    def __init__(self, *args, repetitions: int = 3, **kwargs):
        super().__init__(*args, drop_last=False, **kwargs)
        self.repetitions = repetitions
        length = len(self.dataset)
        self.per_rank = length // self.num_replicas
        self.total = math.ceil(length * repetitions / self.num_replicas) * self.num_replicas

    def __len__(self) -> int:
        return self.per_rank

    def seed_count(self) -> int:
        return len(self.dataset) * self.repetitions

    def order(self) -> Tuple[List[int], List[int]]:
        length = len(self.dataset)
        if self.shuffle:
            shuffled = torch.randperm(length, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            shuffled = list(range(length))
        keys = [i * self.repetitions + copy for i in shuffled for copy in range(self.repetitions)]
        keys += keys[:self.total - len(keys)]  # pad so that every rank deals the same number
        mine = keys[self.rank:self.total:self.num_replicas][:self.per_rank]
        return [key // self.repetitions for key in mine], mine


class ShardSampler(Sampler):
    """Every index exactly once across ranks, no padding: exact validation, the tail included."""

    def __init__(self, length: int, rank: int, world_size: int):
        self.indices = list(range(rank, length, world_size))

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)
