"""--train-crop-scale and --train-crop-ratio: every per-sample backend draws training crops whose area and aspect
ratio lie in the ranges asked."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import decode
from hpc_imagenet.imagenet.data.decode.augment import Augmentation
from hpc_imagenet.imagenet.data.decode.base import IMAGENET_STD
from hpc_imagenet.imagenet.data.decode.fast import FastTrain


def test_fast_boxes_keep_to_the_scale():
    torch.manual_seed(0)
    areas = [h * w / (300 * 200) for (_, _, h, w), _ in (FastTrain.sample(300, 200, (0.5, 0.6)) for _ in range(300))]
    assert min(areas) >= 0.49 and max(areas) <= 0.61  # pixel rounding only
    torch.manual_seed(0)
    default = [h * w / (300 * 200) for (_, _, h, w), _ in (FastTrain.sample(300, 200) for _ in range(300))]
    assert min(default) < 0.3  # RandomResizedCrop's 0.08-1 reaches far smaller crops


@pytest.mark.parametrize("backend", ["fast", "pil", "baseline"])
def test_a_full_scale_crop_keeps_the_whole_picture(backend):
    """Left half black, right half white: a crop of (nearly) the whole image keeps both halves."""
    pixels = np.zeros((64, 64, 3), np.uint8)
    pixels[:, 32:] = 255
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=95)
    torch.manual_seed(0)
    for _ in range(20):
        out = decode.transform(backend, True, 32, None, (0.95, 1.0))(buf.getvalue(), "halves")
        columns = out.float().mean(dim=(0, 1))  # CHW -> one value per column
        dark = (columns < (columns.max() + columns.min()) / 2).float().mean()
        assert 0.3 < dark < 0.7, f"{backend}: a crop lost a half ({dark:.2f} of the columns dark)"


def test_the_flag_is_checked():
    assert config.parse(["--dummy", "--train-crop-scale", "0.35", "1"], "ddp").data.train_crop_scale == (0.35, 1.0)
    with pytest.raises(config.ConfigError, match="0 < MIN <= MAX <= 1"):
        config.parse(["--dummy", "--train-crop-scale", "0.6", "0.2"], "ddp")


def coordinate_png(size: int = 64) -> bytes:
    """Red is the column (x 4), green the row: a crop's width and height can be read back from its pixels."""
    x = np.arange(size, dtype=np.uint8) * 4
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[..., 0], pixels[..., 1] = x[None, :], x[:, None]
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def crop_aspects(backend: str, ratio, n: int = 40):
    """Width / height of N training crops, read from the output's red and green spans."""
    transform = decode.transform(backend, True, 32, None, (0.2, 0.6), Augmentation(crop_ratio=ratio))
    torch.manual_seed(0)
    aspects = []
    for _ in range(n):
        out = transform(coordinate_png(), "coordinates").float()
        if backend == "baseline":  # normalised: back to the pixels' units (the span ignores the mean)
            out = out * torch.tensor(IMAGENET_STD)[:, None, None] * 255
        width = (out[0, :, -1] - out[0, :, 0]).abs().mean()
        height = (out[1, -1, :] - out[1, 0, :]).abs().mean()
        aspects.append(float(width / height))
    return np.array(aspects)


@pytest.mark.parametrize("backend", ["fast", "pil", "baseline"])
def test_square_crops_when_the_ratio_is_one(backend):
    square = crop_aspects(backend, (1.0, 1.0))
    assert np.all(np.abs(square - 1) < 0.15), f"{backend}: {square.min():.2f}-{square.max():.2f}"
    stretched = crop_aspects(backend, (3 / 4, 4 / 3))
    assert np.any(np.abs(stretched - 1) > 0.15), f"{backend}: ImageNet's ratios never stretched a crop"


def test_the_ratio_flag_is_checked():
    data = config.parse(["--dummy", "--train-crop-ratio", "1", "1"], "ddp").data
    assert data.train_crop_ratio == (1.0, 1.0) and Augmentation.of(data).crop_ratio == (1.0, 1.0)
    assert config.parse(["--dummy"], "ddp").data.train_crop_ratio == (3 / 4, 4 / 3)
    with pytest.raises(config.ConfigError, match="--train-crop-ratio 2 1: give 0 < MIN <= MAX"):
        config.parse(["--dummy", "--train-crop-ratio", "2", "1"], "ddp")
