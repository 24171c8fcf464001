"""Progressive resizing: FFCV's rule for every epoch of its six ResNet-50 configs, and the train
loader's output size at the epochs where it changes, for every per-sample backend (dali refuses
the ramp: its resize size is fixed when its pipeline is built); validation at its own resize and
crop sizes."""
import numpy as np
import pytest

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import decode, loader
from hpc_imagenet.imagenet.data.resolution import ResolutionRamp

# rn50_configs/rn50_{epochs}_epochs.yaml: (epochs, start_ramp, end_ramp), min_res 160, max_res 192
FFCV_RAMPS = [(16, 11, 13), (24, 17, 20), (32, 23, 27), (40, 29, 34), (56, 41, 48), (88, 65, 76)]


def _ffcv(epoch, start, end, low=160, high=192):
    """train_imagenet.py's get_resolution, with numpy as there."""
    if epoch <= start:
        return low
    if epoch >= end:
        return high
    return int(np.round(np.interp([epoch], [start, end], [low, high])[0] / 32)) * 32


@pytest.mark.parametrize("epochs,start,end", FFCV_RAMPS)
def test_ramp_equals_ffcv_at_every_epoch(epochs, start, end):
    ramp = ResolutionRamp(160, 192, start, end)
    assert [ramp.at(e) for e in range(epochs)] == [_ffcv(e, start, end) for e in range(epochs)]


def test_ramp_problems_name_the_flags():
    assert "--min-res" in ResolutionRamp(200, 160, 1, 2).problem()
    assert "--start-ramp" in ResolutionRamp(160, 192, 5, 2).problem()
    assert ResolutionRamp(160, 192, 2, 5).problem() == ""


def _size(batch):
    images = batch[0]
    if not hasattr(images, "shape"):  # the device backend's encoded batch
        images = images.decode(__import__("torch").device("cpu"))
    return tuple(images.shape[-2:])


@pytest.mark.parametrize("backend", decode.per_sample_names())
def test_loader_output_size_follows_the_ramp(jpeg_data, backend):
    cfg = config.parse([str(jpeg_data), "--data-backend", backend, "-b", "4", "-j", "0", "--image-size", "32",
                        "--val-crop-size", "48", "--val-resize-size", "56"], environ={})
    ramp = ResolutionRamp(32, 96, 1, 3)
    train, val, _ = loader.build_loaders(cfg, 0, 1, __import__("torch").device("cpu"))
    sizes = []
    for epoch in range(5):
        loader.set_epoch(train, epoch, 0, ramp.at(epoch))
        sizes.append(_size(next(iter(train))))
    assert sizes == [(32, 32), (32, 32), (64, 64), (96, 96), (96, 96)]
    assert _size(next(iter(val))) == (48, 48)


def test_persistent_seeded_workers_get_the_size_from_the_sampler(jpeg_data):
    """Loader workers live across epochs: the size must reach them with each sample."""
    cfg = config.parse([str(jpeg_data), "-b", "4", "-j", "1", "--seed", "3", "--image-size", "32"], environ={})
    train, _, _ = loader.build_loaders(cfg, 0, 1, __import__("torch").device("cpu"))
    ramp = ResolutionRamp(32, 64, 0, 1)
    assert [_size(next(iter(train))) for _ in [loader.set_epoch(train, 0, 0, ramp.at(0))]] == [(32, 32)]
    loader.set_epoch(train, 1, 0, ramp.at(1))
    assert _size(next(iter(train))) == (64, 64)
