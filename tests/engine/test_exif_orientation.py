"""EXIF orientation, treated alike by every data backend: all of them train on the frame the JPEG
stores and ignore the Orientation tag, as pytorch/examples' PIL loader does.

Two files hold the same compressed picture, one with an EXIF Orientation tag of 6 (rotate 90
degrees to display) and one without, so a backend that applied the tag (TorchCodec always does;
DALI and nvImageCodec by default) would give a rotated, differently cropped image for the first.
Each backend must give the same pixels for both, with the same seed for its random crop.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet.data import decode, loader, samplers
from hpc_imagenet.imagenet.data.decode import dali, device

CPU = torch.device("cpu")
SIZE = 32


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple:
    """(plain, rotated): the same 64x40 picture, without and with EXIF Orientation = 6."""
    root = tmp_path_factory.mktemp("exif")
    rng = np.random.default_rng(0)
    pixels = (rng.random((40, 64, 3)) * 255).astype(np.uint8)
    pixels[:12, :20] = (250, 10, 10)  # a corner mark: rotation or flips move it
    picture = Image.fromarray(pixels)
    exif = Image.Exif()
    exif[device.EXIF_ORIENTATION] = 6
    plain, rotated = root / "plain.jpg", root / "rotated.jpg"
    picture.save(plain, quality=95)
    picture.save(rotated, quality=95, exif=exif.tobytes())
    with Image.open(rotated) as im:  # the tag is really there, and PIL would display it rotated
        assert im.getexif()[device.EXIF_ORIENTATION] == 6 and im.size == (64, 40)
    return str(plain), str(rotated)


def cpu_backend_outputs(name: str, train: bool, pair) -> list:
    outs = []
    for path in pair:
        torch.manual_seed(0)  # the same random crop and flip for both files
        image, _ = loader.ImageFiles([(path, 0)], decode.transform(name, train, SIZE))[0]
        if isinstance(image, device.EncodedImage):
            image = device.collate([(image, 0)])[0].decode(CPU)[0]
        outs.append(image)
    return outs


@pytest.mark.parametrize("train", [True, False], ids=["train", "val"])
@pytest.mark.parametrize("name", ["baseline", "pil", "fast", "device"])
def test_every_backend_ignores_the_orientation_tag(pair, name, train):
    plain, rotated = cpu_backend_outputs(name, train, pair)
    assert plain.shape == rotated.shape
    assert torch.equal(plain, rotated), f"{name} treats the EXIF-rotated copy differently"


def test_torchcodec_output_is_turned_back_into_the_stored_frame(pair):
    """Where TorchCodec decodes (it applies the tag), the device backend undoes it: the stored frame."""
    if device.decoder_name() != "torchcodec":
        pytest.skip("TorchCodec is not installed: torchvision decodes, and it ignores the tag itself")
    plain_buf, rotated_buf = (Path(p).read_bytes() for p in pair)
    assert device.exif_orientation(rotated_buf) == 6 and device.exif_orientation(plain_buf) == 1
    displayed = device._torchcodec_decode_jpeg(torch.frombuffer(bytearray(rotated_buf), dtype=torch.uint8))
    assert displayed.shape == (3, 64, 40)  # TorchCodec rotated it
    stored = torch.from_numpy(np.array(Image.open(io.BytesIO(plain_buf)).convert("RGB"))).permute(2, 0, 1)
    assert torch.equal(device.to_stored_frame(displayed, 6), stored)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_each_orientation_is_undone(orientation):
    """All eight EXIF orientations, applied as PIL's exif_transpose applies them, come back exactly."""
    stored = torch.arange(3 * 5 * 7, dtype=torch.uint8).reshape(3, 5, 7)
    picture = Image.fromarray(stored.permute(1, 2, 0).numpy())
    exif = picture.getexif()
    exif[device.EXIF_ORIENTATION] = orientation
    picture.info["exif"] = exif.tobytes()
    from PIL import ImageOps
    displayed = torch.from_numpy(np.array(ImageOps.exif_transpose(picture))).permute(2, 0, 1)
    assert torch.equal(device.to_stored_frame(displayed, orientation), stored)


def test_dali_ignores_the_orientation_tag(pair):
    try:
        dali.require_dali()
    except dali.DaliUnavailable:
        pytest.skip("NVIDIA DALI not installed (requirements-dev.txt installs its CPU build)")
    samples = [(p, 0) for p in pair]
    sampler = samplers.ResumableSampler(range(2), num_replicas=1, rank=0, shuffle=False, seed=0)
    loader = dali.DaliLoader(dali.FileReader(samples), sampler, 2, False, SIZE, CPU, 1, 0, 0, 0)
    images, _ = next(iter(loader))
    assert images.shape == (2, 3, SIZE, SIZE)
    assert torch.equal(images[0], images[1]), "DALI rotated the EXIF-tagged copy"
