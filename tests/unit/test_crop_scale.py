"""--train-crop-scale: every per-sample backend draws training crops whose area lies in the range asked."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import decode
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
