"""The decoding backends: the fast one must augment exactly like the baseline, up to resampling error.

Checked here: the JPEG header parser, that decoding a shortened frame gives the same top rows as a
full decode (baseline, progressive, 4:4:4, grayscale, DCT-scaled), that the crop boxes follow
torchvision's RandomResizedCrop distribution, that on the same box and flip the fast output equals
the baseline's within resampling error, and the outputs' dtype, shape and layout.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import functional as F

from hpc_imagenet.imagenet.common import errors
from hpc_imagenet.imagenet.data import decode as registry, loader
from hpc_imagenet.imagenet.data.decode import base, jpeg, pil
from hpc_imagenet.imagenet.data.decode.fast import FastTrain, FastVal, fast_backend, scaled_box
from tests.helpers import photo

MEAN = torch.tensor(base.IMAGENET_MEAN).view(3, 1, 1)
STD = torch.tensor(base.IMAGENET_STD).view(3, 1, 1)


def read(path) -> bytes:
    """An image file's bytes: what the dataset hands a backend."""
    return Path(path).read_bytes()


def jpeg_bytes(pixels: np.ndarray, **save_kw) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, **save_kw)
    return out.getvalue()


def decode(buf: bytes, draft: int = 1) -> np.ndarray:
    im = Image.open(io.BytesIO(buf))
    if draft > 1:
        im.draft(im.mode, (im.width // draft, im.height // draft))
    return np.asarray(im.convert("RGB"))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> List[str]:
    root = tmp_path_factory.mktemp("jpegs")
    paths = []
    for i, (h, w) in enumerate([(375, 500), (500, 375), (333, 500), (640, 960)]):
        p = root / f"img{i}.JPEG"
        p.write_bytes(jpeg_bytes(photo(h, w, seed=i)))
        paths.append(str(p))
    return paths


# ---------------------------------------------------------------- header and partial decoding

@pytest.mark.parametrize("kw,mode,mcu", [({}, "RGB", 16), ({"subsampling": 0}, "RGB", 8),
                                         ({"progressive": True}, "RGB", 16), ({}, "L", 8)])
def test_frame_header(kw, mode, mcu):
    pixels = photo(123, 77)
    buf = jpeg_bytes(pixels if mode == "RGB" else pixels[..., 0], **kw)
    frame = jpeg.jpeg_frame(buf)
    assert (frame.height, frame.width, frame.mcu_rows, frame.row_prefix) == (123, 77, mcu, True)
    assert int.from_bytes(buf[frame.height_offset:frame.height_offset + 2], "big") == 123


def test_fast_backend_without_the_region_decoder_warns_once(monkeypatch, caplog):
    from hpc_imagenet.imagenet.data.decode import fast

    monkeypatch.setattr(jpeg, "_jpeg_region", None)
    monkeypatch.setattr(fast, "_told_no_region_decoder", False)
    with caplog.at_level("WARNING", logger="hpc_imagenet.imagenet.data.decode.fast"):
        fast_backend(True, 32), fast_backend(False, 32), fast_backend(True, 32)
    assert len(caplog.records) == 1 and "without its region decoder" in caplog.records[0].getMessage()
    assert not jpeg.region_decoder_available()
    assert registry.decoder_in_use("fast") == {"backend": "fast", "region_decoder": False}


def test_not_a_jpeg():
    png = io.BytesIO()
    Image.fromarray(photo(20, 20)).save(png, "PNG")
    assert jpeg.jpeg_frame(png.getvalue()) is None
    assert jpeg.jpeg_frame(b"\xff\xd8\xff\xe0\x00") is None  # truncated before any frame header


@pytest.mark.parametrize("kw,gray", [({}, False), ({"progressive": True}, False), ({"subsampling": 0}, False),
                                     ({"subsampling": 1}, False), ({}, True), ({"restart_marker_blocks": 5}, False)])
def test_shortened_frame_decodes_the_same_top_rows(kw, gray):
    """4:2:0, progressive, 4:4:4, 4:2:2, grayscale and restart markers, at full scale and DCT-scaled."""
    pixels = photo(375, 500, seed=3)
    buf = jpeg_bytes(pixels[..., 0] if gray else pixels, **kw)
    frame = jpeg.jpeg_frame(buf)
    for draft in (1, 2, 4, 8):
        full = decode(buf, draft)
        for bottom in (1, 15, 16, 100, 173, 300, 350):
            rows = frame.rows_for(bottom, draft)
            part = decode(jpeg.with_rows(buf, frame, rows), draft)
            assert part.shape[0] == -(-rows // draft) < full.shape[0]
            keep = -(-bottom // draft)
            np.testing.assert_array_equal(part[:keep], full[:keep], err_msg=f"bottom {bottom}, 1/{draft}")


def test_rows_for_keeps_the_whole_frame_near_the_bottom():
    frame = jpeg.jpeg_frame(jpeg_bytes(photo(375, 500)))
    assert frame.rows_for(370) == 375
    assert jpeg.with_rows(b"unchanged", frame, 375) == b"unchanged"


def test_dct_reduction_never_upsamples():
    assert jpeg.dct_reduction(375, 500, 224, 224) == 1
    assert jpeg.dct_reduction(448, 448, 224, 224) == 2
    assert jpeg.dct_reduction(447, 1000, 224, 224) == 1
    assert jpeg.dct_reduction(300, 400, 64, 64) == 4
    assert jpeg.dct_reduction(3000, 4000, 224, 224) == 8


# ---------------------------------------------------------------- crop distribution

def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.sort(np.concatenate([a, b]))
    cdf = lambda s: np.searchsorted(np.sort(s), grid, side="right") / len(s)  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


def box_features(boxes: np.ndarray, height: int, width: int) -> dict:
    top, left, h, w = boxes.T.astype(float)
    return {"area": h * w / (height * width), "log_aspect": np.log(w / h),
            "centre_y": (top + h / 2) / height, "centre_x": (left + w / 2) / width}


@pytest.mark.parametrize("height,width", [(375, 500), (500, 375), (40, 600)])
def test_crop_boxes_follow_torchvisions_distribution(height, width):
    n = 4000
    torch.manual_seed(1)
    ours = np.array([FastTrain.sample(height, width)[0] for _ in range(n)])
    torch.manual_seed(2)
    shape = torch.empty((0, height, width))
    theirs = np.array([T.RandomResizedCrop.get_params(shape, base.CROP_SCALE, base.CROP_RATIO) for _ in range(n)])
    critical = 1.95 * np.sqrt(2 / n)  # two-sample KS at alpha = 0.001
    fa, fb = box_features(ours, height, width), box_features(theirs, height, width)
    for name in fa:
        assert ks_statistic(fa[name], fb[name]) < critical, name
    assert ((ours[:, 0] >= 0) & (ours[:, 0] + ours[:, 2] <= height)).all()
    assert ((ours[:, 1] >= 0) & (ours[:, 1] + ours[:, 3] <= width)).all()


def test_flip_is_a_fair_coin():
    torch.manual_seed(0)
    flips = [FastTrain.sample(375, 500)[1] for _ in range(2000)]
    assert 0.45 < np.mean(flips) < 0.55


# ---------------------------------------------------------------- same box: resampling error only

def baseline_on_box(path: str, box, flip: bool, size: int) -> torch.Tensor:
    """The baseline's transform on a given box and flip, back in 0-255 units."""
    img = F.resized_crop(Image.open(path).convert("RGB"), *box, [size, size], antialias=True)
    if flip:
        img = F.hflip(img)
    normalized = F.normalize(F.to_tensor(img), base.IMAGENET_MEAN, base.IMAGENET_STD)
    return (normalized * STD + MEAN) * 255


def used_box(box, reduction: int, height: int, width: int):
    """The full-size box the fast backend resamples after decoding at 1/reduction."""
    if reduction == 1:
        return box
    y, x, h, w = scaled_box(box, reduction, -(-height // reduction), -(-width // reduction))
    return y * reduction, x * reduction, min(h * reduction, height - y * reduction), min(w * reduction,
                                                                                         width - x * reduction)


@pytest.mark.parametrize("size", [224, 64])
def test_fast_train_matches_the_baseline_on_the_same_box(files, size):
    """Full-scale decodes match the baseline to rounding. DCT-scaled ones (big crops) move each box
    edge by at most reduction/2 pixels and low-pass with the scaled IDCT instead of the bilinear
    filter: 1-4 grey levels on this per-pixel-noise texture, less on photos."""
    fast = FastTrain(size)
    torch.manual_seed(0)
    reductions = set()
    for path in files:
        buf = Path(path).read_bytes()
        frame = jpeg.jpeg_frame(buf)
        for _ in range(6):
            box, flip = fast.sample(frame.height, frame.width)
            r = jpeg.dct_reduction(box[2], box[3], size, size)
            reductions.add(r)
            used = used_box(box, r, frame.height, frame.width)
            edges = np.subtract([used[0], used[1], used[0] + used[2], used[1] + used[3]],
                                [box[0], box[1], box[0] + box[2], box[1] + box[3]])
            assert np.abs(edges).max() <= r // 2 + (r > 1), (box, used)
            out = fast.render(buf, frame, box, flip)
            assert out.dtype == torch.uint8 and out.shape == (3, size, size) and out.is_contiguous()
            diff = (out.float() - baseline_on_box(path, used, flip, size)).abs()
            if r == 1:
                assert diff.mean() < 0.5 and diff.max() <= 2, box
            else:
                assert diff.mean() < 4, (box, r)  # box (1/8: DC only) vs triangle low-pass
    assert 1 in reductions and max(reductions) > 1  # both paths were exercised


def test_fast_and_baseline_draw_from_the_same_random_stream_only_through_sample(files):
    """Seeded runs are reproducible: same seed, same output."""
    fast = fast_backend(True, 224)
    torch.manual_seed(5)
    a = fast(read(files[0]))
    torch.manual_seed(5)
    assert torch.equal(a, fast(read(files[0])))


@pytest.mark.parametrize("index", [0, 1, 3])
def test_fast_val_matches_the_baseline(files, index):
    """Resize + centre crop: uint8 vs float rounding only."""
    base = pil.baseline_backend(False, 224)(read(files[index]))
    fast = fast_backend(False, 224)(read(files[index]))
    assert fast.dtype == torch.uint8 and fast.shape == base.shape == (3, 224, 224) and fast.is_contiguous()
    diff = (fast.float() - (base * STD + MEAN) * 255).abs()
    assert diff.mean() < 0.5 and diff.max() <= 2


# ---------------------------------------------------------------- plumbing

def test_fast_handles_non_jpeg_grayscale_and_cmyk(tmp_path):
    png, gray, cmyk = tmp_path / "a.png", tmp_path / "g.jpg", tmp_path / "c.jpg"
    Image.fromarray(photo(90, 120)).save(png)
    Image.fromarray(photo(90, 120)[..., 0]).save(gray, quality=90)
    Image.fromarray(photo(90, 120)).convert("CMYK").save(cmyk, quality=90)
    for path in (png, gray, cmyk):
        for train in (True, False):
            out = fast_backend(train, 32)(read(path))
            assert out.dtype == torch.uint8 and out.shape == (3, 32, 32)


def test_backends_are_registered_and_picklable(files):
    # one registry for every --data-backend; dali builds whole batches, the others decode samples
    assert set(registry.BACKENDS) == {"pil", "baseline", "fast", "device", "dali"}
    assert registry.per_sample_names() == ["baseline", "device", "fast", "pil"]
    with pytest.raises(errors.DataError, match="dali decodes whole batches"):
        registry.transform("dali", True, 32)
    with pytest.raises(errors.DataError, match="unknown --data-backend 'nope'; choose one of: baseline, dali"):
        registry.get_backend("nope")
    for name in ("baseline", "fast", "pil"):
        for train in (True, False):
            fn = pickle.loads(pickle.dumps(registry.transform(name, train, 32)))
            out = fn(read(files[0]))
            assert out.shape == (3, 32, 32)
            assert out.dtype == (torch.float32 if name == "baseline" else torch.uint8)


def test_loader_batches(files):
    ds = loader.ImageFiles([(p, i) for i, p in enumerate(files)], fast_backend(True, 32))
    images, targets = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert images.dtype == torch.uint8 and images.shape == (4, 3, 32, 32) and targets.tolist() == [0, 1, 2, 3]


def test_bench_measures_both_backends(files):
    from hpc_imagenet.harness.runners import pipeline_bench

    samples = [(p, 0) for p in files[:2]]
    rows = pipeline_bench.summarize(pipeline_bench.bench(samples, ["baseline", "fast"], [0], 32, 2, rounds=1))
    assert {r["backend"] for r in rows} == {"baseline", "fast"}
    assert all(r["images_per_cpu_s"] > 0 for r in rows)
    assert {r["ratio_per_core"] for r in rows if r["backend"] == "baseline"} == {1.0}


@pytest.mark.parametrize("subsampling", [0, 2], ids=["4:4:4", "4:2:0"])
def test_simplejpeg_and_pil_decodes_give_the_fast_backend_the_same_pixels(monkeypatch, subsampling):
    """simplejpeg is only the faster caller of libjpeg-turbo: crops (frame shortened to the box, flip)
    and validation outputs are bit-identical to the PIL fallback's."""
    assert jpeg.simplejpeg is not None, "simplejpeg is in requirements.txt"
    monkeypatch.setattr(jpeg, "_jpeg_region", None)  # the row decoders (the region decoder: test_jpeg_region)
    buf = jpeg_bytes(photo(seed=3), subsampling=subsampling)
    frame = jpeg.jpeg_frame(buf)
    cases = [((10, 20, 300, 280), False), ((0, 0, 375, 500), True), ((200, 300, 90, 120), True)]
    fast, val = FastTrain(224), FastVal(224)
    with_simplejpeg = [fast.render(buf, frame, box, flip) for box, flip in cases] + [val(buf)]
    monkeypatch.setattr(jpeg, "simplejpeg", None)
    with_pil = [fast.render(buf, frame, box, flip) for box, flip in cases] + [val(buf)]
    for a, b in zip(with_simplejpeg, with_pil):
        assert a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("mode", ["CMYK", "L"])
def test_cmyk_and_grey_jpegs_decode_to_rgb_as_pil_converts_them(mode):
    out = io.BytesIO()
    Image.fromarray(photo(64, 80)).convert(mode).save(out, "JPEG")
    buf = out.getvalue()
    pil = torch.from_numpy(np.array(Image.open(io.BytesIO(buf)).convert("RGB")))
    assert (jpeg.decode_hwc(buf).int() - pil.int()).abs().max() <= 1  # CMYK: rounding of the conversion
    assert FastVal(32)(buf).shape == (3, 32, 32) and FastTrain(32)(buf).shape == (3, 32, 32)


def test_bytes_simplejpeg_rejects_fall_back_to_pil():
    assert jpeg.decode_hwc(b"\xff\xd8\xff\xdb" + b"\0" * 40) is None
