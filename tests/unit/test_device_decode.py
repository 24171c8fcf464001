"""The device data backend on the CPU: the same images as the fast backend, through a batch of bytes.

On a GPU the same code decodes with nvJPEG (tests/engine/test_gpu.py); here decode_jpeg runs on the CPU,
which checks the transforms, the collation, the errors and the engine's use of it. TorchCodec
decodes where it is installed (requirements-dev.txt installs it), torchvision where not: both are
run here, the second by hiding TorchCodec.
"""
import io

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from hpc_imagenet.imagenet.common import errors
from hpc_imagenet.imagenet.data import loader, normalize
from hpc_imagenet.imagenet.data.decode import device, jpeg
from hpc_imagenet.imagenet.data.decode.fast import FastTrain, FastVal
from hpc_imagenet.harness.runners import jpegs

CPU = torch.device("cpu")


@pytest.fixture(params=["torchcodec", "torchvision"], autouse=True)
def decoder(request, monkeypatch):
    """Each test with TorchCodec's decoder (skipped where it is not installed) and with torchvision's."""
    if request.param == "torchcodec" and device.decoder_name() != "torchcodec":
        pytest.skip("TorchCodec is not installed")
    if request.param == "torchvision":
        monkeypatch.setattr(device, "_torchcodec_decode_jpeg", None)
    assert device.decoder_name() == request.param
    return request.param


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """ImageNet-like 500x375 JPEGs."""
    root = tmp_path_factory.mktemp("photos")
    jpegs.ensure_dataset(root, classes=2, train_per_class=3, val_per_class=1)
    return sorted(str(p) for p in (root / "train").rglob("*.JPEG"))


@pytest.mark.parametrize("box,flip", [((10, 20, 300, 280), False), ((0, 0, 375, 500), True),
                                      ((200, 300, 90, 120), True)])
def test_train_crops_match_the_fast_backend(photos, box, flip):
    fast = FastTrain(224)
    for path in photos:
        buf = open(path, "rb").read()
        expected = fast.render(buf, jpeg.jpeg_frame(buf), box, flip)
        batch = device.EncodedBatch([torch.frombuffer(bytearray(buf), dtype=torch.uint8)],
                                           torch.tensor([[*box, int(flip), 224, -1, 1]]), [path])
        got = batch.decode(CPU)[0]
        diff = (got.int() - expected.int()).abs()
        assert got.shape == expected.shape == (3, 224, 224) and got.dtype == torch.uint8
        # two libjpeg builds and a float vs a uint8 resize: rounding, not a different picture
        assert diff.float().mean() < 1.0 and diff.max() <= 12


@pytest.mark.parametrize("kind", ["PNG", "CMYK"])
def test_png_and_cmyk_images_reach_the_device_as_rgb_jpegs(photos, kind):
    """ImageNet's odd files: the worker re-encodes them (nvJPEG reads neither); the pixels stay the picture."""
    buf = io.BytesIO()
    with Image.open(photos[0]) as im:
        im.save(buf, "PNG") if kind == "PNG" else im.convert("CMYK").save(buf, "JPEG", quality=95)
    encoded = device.EncodedVal(224)(buf.getvalue(), "odd.JPEG")
    assert jpeg.jpeg_frame(bytes(encoded.data.numpy())) is not None
    got = device.collate([(encoded, 0)])[0].decode(CPU)[0]
    expected = FastVal(224)(buf.getvalue())
    other = FastVal(224)(open(photos[1], "rb").read())
    # a quality-95 re-encode of a noisy photo: a few levels off, far from another picture
    assert (got.int() - expected.int()).abs().float().mean() < 5.0 < (got.int() - other.int()).abs().float().mean()


def test_val_matches_the_fast_backend(photos):
    got = device.collate([(device.EncodedVal(224)(open(p, "rb").read(), p), 0) for p in photos])[0].decode(CPU)
    expected = torch.stack([FastVal(224)(open(p, "rb").read()) for p in photos])
    assert got.shape == expected.shape and (got.int() - expected.int()).abs().float().mean() < 1.0


def test_loader_batches_stay_encoded_until_the_normalizer(photos):
    files = loader.ImageFiles([(p, i % 2) for i, p in enumerate(photos)], device.EncodedTrain(64))
    images, targets = next(iter(DataLoader(files, batch_size=4, collate_fn=device.collate)))
    assert isinstance(images, device.EncodedBatch) and len(images) == 4 and targets.tolist() == [0, 1, 0, 1]
    out = normalize.DeviceNormalizer(CPU, channels_last=False)(images)
    assert out.shape == (4, 3, 64, 64) and out.dtype == torch.float32
    assert -3 < out.min() < out.max() < 3  # normalised, not 0-255


def test_broken_image_is_a_bad_image_and_undecodable_bytes_name_the_files(photos, tmp_path):
    png = tmp_path / "x.JPEG"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    files = loader.ImageFiles([(str(png), 0)], device.EncodedTrain(64))
    with pytest.raises(errors.DataError, match="cannot read image .*x.JPEG.*--skip-bad-images"):
        files[0]
    broken = device.EncodedBatch([torch.frombuffer(bytearray(b"\xff\xd8\xff\xdb" + b"\0" * 40), dtype=torch.uint8)],
                                        torch.tensor([[0, 0, 8, 8, 0, 8, 1]]), [photos[0]])
    name = photos[0].split("/")[-1]
    with pytest.raises(errors.DataError, match="cannot decode a JPEG.*" + name + ".*--data-backend fast"):
        broken.decode(CPU)
