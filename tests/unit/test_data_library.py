"""The engine's data path for your own script (hpc_imagenet.imagenet.data.library): each rank's share of the
training images, normalised as the engine does, reshuffled per epoch; every validation image once across ranks;
bad settings one line. The LightningDataModule around it: tests/engine/test_lightning_data.py."""
from __future__ import annotations

import pytest
import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import demo
from hpc_imagenet.imagenet.data.library import image_loaders
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """2 classes of 12 training and 5 validation JPEGs."""
    return demo.generate(tmp_path_factory.mktemp("photos"), classes=2, train_per_class=12, val_per_class=5,
                         size=(40, 32))


def _loaders(root, rank=0, world_size=1, **kw):
    return image_loaders(root, batch_size=4, image_size=16, workers=0, rank=rank, world_size=world_size,
                         device="cpu", **kw)


def _labels_and_sums(batches):
    """Each sample as (label, pixel sum): identifies the image regardless of the batch it came in."""
    return [(int(t), float(im.float().sum())) for images, target in batches for im, t in zip(images, target)]


def test_each_rank_trains_its_own_share_normalised_like_the_engine(photos):
    ranks = [_loaders(photos, rank=r, world_size=2) for r in (0, 1)]
    assert all(data.num_classes == 2 for data in ranks)
    shares = [len(list(data.train_batches)) for data in ranks]
    assert shares == [3, 3]  # 24 images over 2 ranks, batch 4
    # the shares (the samplers' dataset indices; seeded runs pair each with its augmentation seed) are disjoint
    # and together the whole training set
    indices = [[i[0] if isinstance(i, tuple) else i for i in data.train_batches.sampler] for data in ranks]
    assert sorted(indices[0] + indices[1]) == list(range(24))
    images, target = next(iter(ranks[0].train))
    raw, _ = next(iter(ranks[0].train_batches))
    assert images.dtype == torch.float32 and images.shape == (4, 3, 16, 16) and target.dtype == torch.int64
    assert raw.dtype == torch.uint8 and torch.equal(images, DeviceNormalizer(torch.device("cpu"), False)(raw))


def test_batches_kept_by_the_caller_stay_as_they_were(photos):
    """The engine's loop reuses one buffer a shape on the CPU; a user's loop may keep batches, so not here."""
    data = _loaders(photos)
    kept = [images for images, _ in data.val]
    assert len({images.data_ptr() for images in kept}) == len(kept)
    assert not torch.equal(kept[0][:2], kept[1][:2])


def test_the_validation_images_are_seen_once_across_ranks(photos):
    seen = [_labels_and_sums(_loaders(photos, rank=r, world_size=2).val_batches) for r in (0, 1)]
    assert len(seen[0]) + len(seen[1]) == 10  # 5 a class, no padding repeats
    alone = _labels_and_sums(_loaders(photos).val_batches)
    assert sorted(seen[0] + seen[1]) == sorted(alone)


def test_set_epoch_reshuffles_the_same_way_every_time(photos):
    data = _loaders(photos)
    orders = []
    for epoch in (0, 1, 0):
        data.set_epoch(epoch)
        orders.append([int(t) for _, target in data.train_batches for t in target])
    assert orders[0] == orders[2] and orders[0] != orders[1]
    data.set_epoch(1, samples_done=8)  # resumed after two batches: the rest of the epoch
    assert [int(t) for _, target in data.train_batches for t in target] == orders[1][8:]


def test_engine_flags_pass_through_and_bad_ones_are_one_line(photos, tmp_path):
    data = _loaders(photos, flags=["--train-crop-ratio", "1", "1", "--data-backend", "pil"])
    assert next(iter(data.train))[0].shape == (4, 3, 16, 16)
    with pytest.raises(config.ConfigError) as err:
        _loaders(photos, flags=["--train-crop-scale", "0.9", "0.1"])
    assert "\n" not in str(err.value) and "--train-crop-scale 0.9 0.1" in str(err.value)
    with pytest.raises(config.ConfigError) as err:
        _loaders(tmp_path / "nowhere")
    assert "\n" not in str(err.value) and "nowhere" in str(err.value)
