"""The C region decoder (hpc_imagenet/imagenet/data/decode/_jpeg_region.c): a box decoded alone must equal the same box
cut
from a full decode, for every chroma subsampling, progressive and greyscale files, odd sizes and
boxes on every edge; what it cannot decode must fall back to the row decoders, unchanged.
"""
from __future__ import annotations

import io
import random

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from hpc_imagenet.imagenet.data.decode import jpeg
from hpc_imagenet.imagenet.data.decode.fast import FastTrain, crop_box
from tests.helpers import photo

SUBSAMPLINGS = ["444", "422", "420", "440", "411", "Gray"]


def encoded(pixels: np.ndarray, subsampling: str) -> bytes:
    if subsampling == "Gray":
        return simplejpeg.encode_jpeg(np.ascontiguousarray(pixels[..., :1]), quality=90, colorspace="Gray")
    return simplejpeg.encode_jpeg(pixels, quality=90, colorsubsampling=subsampling)


def boxes(height: int, width: int, count: int, seed: int):
    """Random RandomResizedCrop boxes plus the corners, edges, whole image and single pixels."""
    rng = random.Random(seed)
    yield from [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1), (0, width - 17, height, 17),
                (height - 9, 0, 9, width), (3, 5, height - 7, width - 11)]
    for _ in range(count):
        yield crop_box(height, width, [rng.random() for _ in range(40)])


def test_the_extension_is_built():
    """make setup builds it (setup.py); without it the fast backend silently loses the region decode."""
    assert jpeg._jpeg_region is not None, "build it: pip install --no-build-isolation -e . (needs gcc and libjpeg-dev)"


@pytest.mark.parametrize("subsampling", SUBSAMPLINGS)
@pytest.mark.parametrize("size", [(375, 500), (301, 333)], ids=["500x375", "333x301"])
def test_a_decoded_box_equals_the_box_of_a_full_decode(subsampling, size):
    buf = encoded(photo(*size, seed=len(subsampling)), subsampling)
    full = torch.from_numpy(simplejpeg.decode_jpeg(buf, colorspace="RGB"))
    for top, left, h, w in boxes(*size, count=10, seed=size[0]):
        region = jpeg.decode_box(buf, (top, left, h, w))
        assert torch.equal(region, full[top:top + h, left:left + w]), (subsampling, (top, left, h, w))


def test_progressive_files_decode_by_region_too():
    out = io.BytesIO()
    Image.fromarray(photo(200, 260, seed=4)).save(out, "JPEG", quality=90, progressive=True)
    buf = out.getvalue()
    full = torch.from_numpy(np.array(Image.open(io.BytesIO(buf)).convert("RGB")))
    for top, left, h, w in boxes(200, 260, count=8, seed=1):
        assert torch.equal(jpeg.decode_box(buf, (top, left, h, w)), full[top:top + h, left:left + w])


@pytest.mark.parametrize("flip", [False, True])
def test_the_fast_backend_gives_the_same_output_with_and_without_the_extension(monkeypatch, flip):
    buf = encoded(photo(seed=7), "420")
    frame = jpeg.jpeg_frame(buf)
    fast = FastTrain(224)
    cases = list(boxes(375, 500, count=4, seed=2))
    with_region = [fast.render(buf, frame, box, flip) for box in cases]
    monkeypatch.setattr(jpeg, "_jpeg_region", None)
    without = [fast.render(buf, frame, box, flip) for box in cases]
    for box, a, b in zip(cases, with_region, without):
        assert torch.equal(a, b), box


def test_cmyk_is_left_to_the_row_decoders():
    out = io.BytesIO()
    Image.fromarray(photo(64, 80)).convert("CMYK").save(out, "JPEG")
    assert jpeg._jpeg_region.decode_region(out.getvalue(), 0, 0, 8, 8) is None
    assert jpeg.decode_box(out.getvalue(), (0, 0, 8, 8)) is None
    assert FastTrain(32)(out.getvalue()).shape == (3, 32, 32)


def test_corrupt_data_and_bad_boxes_raise_one_line_errors():
    buf = encoded(photo(96, 128), "420")
    with pytest.raises(ValueError, match="outside the 128x96 image"):
        jpeg._jpeg_region.decode_region(buf, 90, 0, 10, 10)
    with pytest.raises(ValueError, match="must be positive"):
        jpeg._jpeg_region.decode_region(buf, 0, 0, 0, 10)
    truncated = buf[:len(buf) // 2]
    with pytest.raises(ValueError, match="(?i)premature end"):  # a warning in libjpeg, an error here
        jpeg._jpeg_region.decode_region(truncated, 80, 0, 16, 16)
    with pytest.raises(ValueError):
        jpeg._jpeg_region.decode_region(b"not a jpeg", 0, 0, 1, 1)
    assert jpeg.decode_box(truncated, (80, 0, 16, 16)) is None  # the fast backend then uses the row decoders
