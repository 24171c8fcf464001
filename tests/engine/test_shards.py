"""Tar shards: the real converter on generated JPEGs, the shard source, training from shards.

Checked: a lossless repack keeps every byte and class in ImageFolder order in standard tars; the
index reads any sample by its global index with one open per shard; --max-side re-encodes; a killed
conversion resumes and skips finished shards; bad images, truncated shards, missing shards and
stale indexes each stop with one line; the entry script trains from shards exactly as from the
ImageFolder and resumes exactly.
"""
import io
import json
import os
import shutil
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.common import errors
from hpc_imagenet.imagenet.data import loader, samplers, scan, shards, sources
from hpc_imagenet.imagenet.data.decode import fast
from hpc_imagenet.harness.runners import jpegs
from tests.engine import dali_colours
from tests.helpers import BIN, PYTHON, TINY, explain, read_run, run, script
from tests.warm_start import warm_python

SEEDED = [*TINY, "--seed", "7", "--deterministic", "-p", "1"]


def convert(src, dst, *extra):
    return run([PYTHON, "-m", "hpc_imagenet.imagenet.data.shards", str(src), str(dst), "--workers", "2",
                *map(str, extra)])


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """ImageNet-like 500x375 ~110 KB JPEGs: 2 classes x 4 train, 2 val."""
    root = tmp_path_factory.mktemp("photos")
    jpegs.ensure_dataset(root, classes=2, train_per_class=4, val_per_class=1)
    return root


@pytest.fixture(scope="module")
def photo_shards(photos, tmp_path_factory):
    dst = tmp_path_factory.mktemp("photo_shards") / "s"
    proc = convert(photos, dst, "--shard-size", "0.25", "--verify")
    assert proc.returncode == 0, explain(proc)
    assert "verified 10 samples" in proc.stdout
    return dst


@pytest.fixture(scope="module")
def demo_shards(jpeg_data, tmp_path_factory):
    dst = tmp_path_factory.mktemp("demo_shards") / "s"
    proc = convert(jpeg_data, dst, "--shard-size", "0.002")
    assert proc.returncode == 0, explain(proc)
    return dst


def test_lossless_repack_keeps_every_byte_class_and_order_in_standard_tars(photos, photo_shards):
    folder_classes, folder = scan.scan_dataset(str(photos))
    classes, index = scan.scan_dataset(str(photo_shards))
    assert classes == folder_classes and isinstance(index["train"], sources.ShardIndex)
    for split in ("train", "val"):
        assert len(index[split]) == len(folder[split])
        for i in range(len(folder[split])):
            assert index[split].read(i) == folder[split].read(i)
            assert index[split].target(i) == folder[split].target(i)
    train = index["train"]
    assert len(train.shard_names) >= 3 and train.opens == len(train.shard_names)  # one open per shard
    names = tarfile.open(photo_shards / train.shard_names[0]).getnames()
    assert names[:2] == ["00000000.jpg", "00000000.cls"]  # the WebDataset layout


def test_loader_workers_read_shards_with_one_open_per_shard(photo_shards):
    _, index = scan.scan_dataset(str(photo_shards))
    files = loader.ImageFiles(index["train"], fast.fast_backend(True, 32))
    batches = list(torch.utils.data.DataLoader(files, batch_size=2, num_workers=0))
    assert sum(len(t) for _, t in batches) == 8 and files.source.opens == len(index["train"].shard_names)


def test_a_seeded_run_with_workers_opens_each_shard_once_per_worker(demo_shards, tmp_path, monkeypatch):
    """Seeded runs keep their loader workers, and so their open shards, across epochs.

    os.open is wrapped (still opening) in this process before the workers fork, so every open of a
    shard by a worker is logged with the worker's pid.
    """
    log = os.open(tmp_path / "opens", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    real_open = os.open

    def logging_open(path, *args, **kwargs):
        if str(path).startswith(str(demo_shards)):
            os.write(log, f"{os.getpid()} {path}\n".encode())
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", logging_open)
    cfg = config.parse([str(demo_shards), "--seed", "7", "--workers", "2", "-b", "8", "--image-size", "24"],
                       variant="nd")
    train, _, _ = loader.build_loaders(cfg, 0, 1, torch.device("cpu"))
    for epoch in range(3):
        loader.set_epoch(train, epoch)
        assert sum(len(t) for _, t in train) == len(train) * 8
    opens = [tuple(line.split()) for line in (tmp_path / "opens").read_text().splitlines()]
    shard_files = {str(demo_shards / name) for name in sources.load_index(str(demo_shards))[1]["train"].shard_names}
    assert {path for _, path in opens} == shard_files and len(shard_files) > 2  # every shard was read
    assert len({pid for pid, _ in opens}) == 2, "the 2 workers should serve all 3 epochs"
    assert len(opens) == len(set(opens)), "a worker opened a shard twice"


def test_max_side_reencodes_only_larger_images(photos, tmp_path):
    proc = convert(photos, tmp_path / "s", "--max-side", "320", "--quality", "85")
    assert proc.returncode == 0, explain(proc)
    _, index = scan.scan_dataset(str(tmp_path / "s"))
    sizes = [Image.open(io.BytesIO(index["train"].read(i))).size for i in range(len(index["train"]))]
    assert set(sizes) == {(320, 240)}  # 500x375 scaled to a longer side of 320
    proc = convert(photos, tmp_path / "t", "--max-side", "600")
    _, same = scan.scan_dataset(str(tmp_path / "t"))
    assert same["train"].read(0) == (photos / "train" / "n00000000" / "img_00000.JPEG").read_bytes()


def test_an_interrupted_conversion_resumes_and_keeps_finished_shards(photos, photo_shards, tmp_path):
    dst = tmp_path / "s"
    shutil.copytree(photo_shards, dst)
    # what a kill leaves: no index, a half-written temp shard, a shard not yet started
    (dst / sources.INDEX_NAME).unlink()
    (dst / "train-000001.tar").unlink()
    (dst / ".train-000001.tar.k2x9q.tmp").write_bytes(b"half a shard")  # hpc_imagenet.imagenet.common.files' temp name
    (dst / "train-000001.tar.tmp").write_bytes(b"half a shard")  # the name older versions used
    kept = os.stat(dst / "train-000000.tar").st_mtime_ns
    with pytest.raises(errors.DataError):
        sources.load_index(str(dst))
    proc = convert(photos, dst, "--shard-size", "0.25")
    assert proc.returncode == 0, explain(proc)
    assert os.stat(dst / "train-000000.tar").st_mtime_ns == kept
    assert not list(dst.glob("*.tmp")) and not list(dst.glob(".*.tmp"))
    assert (dst / "train-000001.tar").read_bytes() == (photo_shards / "train-000001.tar").read_bytes()
    with np.load(dst / sources.INDEX_NAME) as got, np.load(photo_shards / sources.INDEX_NAME) as want:
        assert got.files == want.files and all(np.array_equal(got[k], want[k]) for k in got.files)
    other = convert(photos, dst, "--shard-size", "0.25", "--max-side", "100")
    assert other.returncode == 1 and "holds the output of a different conversion" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1


def test_an_unreadable_image_is_named_or_skipped(photos, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(photos, src)
    bad = src / "train" / "n00000001" / "img_00002.JPEG"
    bad.write_bytes(b"not an image at all")
    proc = convert(src, tmp_path / "a")
    assert proc.returncode == 1 and not (tmp_path / "a" / sources.INDEX_NAME).exists()
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: cannot read image {bad}")
    assert "--skip-bad-images" in proc.stderr
    proc = convert(src, tmp_path / "b", "--skip-bad-images")
    assert proc.returncode == 0, explain(proc)
    assert json.loads(proc.stdout.splitlines()[0])["skipped"] == 1 and str(bad) in proc.stderr
    _, index = scan.scan_dataset(str(tmp_path / "b"))
    assert len(index["train"]) == 7


def _train(dataset, run_dir, *extra):
    return warm_python(script("imagenet_nd.py"), *SEEDED, *extra, "--log-dir", run_dir, dataset)


def _same_weights(a, b):
    wa = torch.load(a / "checkpoint.pth.tar", weights_only=True)
    wb = torch.load(b / "checkpoint.pth.tar", weights_only=True)
    return wa["epoch"] == wb["epoch"] and all(torch.equal(t, wb["model"][k]) for k, t in wa["model"].items())


def test_training_from_shards_equals_training_from_the_folder(jpeg_data, demo_shards, tmp_path):
    """Same indexes, same bytes, same seeds: the same weights, with loader workers reading shards."""
    a = _train(jpeg_data, tmp_path / "folder", "--epochs", "1", "--workers", "2")
    b = _train(demo_shards, tmp_path / "shards", "--epochs", "1", "--workers", "2")
    assert a.returncode == 0 and b.returncode == 0, explain(b if a.returncode == 0 else a)
    assert _same_weights(tmp_path / "folder", tmp_path / "shards")


def test_resume_from_shards_is_exact(demo_shards, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    for proc in (_train(demo_shards, straight, "--epochs", "2"), _train(demo_shards, split, "--epochs", "1"),
                 _train(demo_shards, split, "--epochs", "2", "--resume", "auto")):
        assert proc.returncode == 0, explain(proc)
    assert _same_weights(straight, split)


def _train_fails(dataset, tmp_path, expected):
    proc = _train(dataset, tmp_path / "run", "--epochs", "1")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert expected in last, proc.stderr[-2000:]
    return last


def test_a_truncated_shard_stops_training_in_one_line(demo_shards, tmp_path):
    dst = tmp_path / "s"
    shutil.copytree(demo_shards, dst)
    _, index = sources.load_index(str(demo_shards))
    train = index["train"]
    last = int(np.flatnonzero(train.shard == 1)[-1])
    shard = dst / "train-000001.tar"
    shard.write_bytes(shard.read_bytes()[:train.offset[last] + train.size[last] - 10])  # cut into its last image
    _train_fails(dst, tmp_path, f"shard {shard} is")
    # the source itself also refuses a short read, should a shard shrink after start-up
    train.root = str(dst)
    with pytest.raises(errors.DataError, match="truncated"):
        train.read(last)


def test_a_missing_shard_or_an_index_beyond_its_shards_stops_in_one_line(demo_shards, tmp_path):
    dst = tmp_path / "s"
    shutil.copytree(demo_shards, dst)
    (dst / "val-000000.tar").unlink()
    _train_fails(dst, tmp_path, "val-000000.tar is missing")
    shutil.rmtree(dst)
    shutil.copytree(demo_shards, dst)
    with np.load(dst / sources.INDEX_NAME) as z:
        arrays = dict(z)
    arrays["train_offset"][-1] += 10_000_000  # a stale index: points past its shard's end
    np.savez(dst / sources.INDEX_NAME, **arrays)
    _train_fails(dst, tmp_path, "truncated or not the shard the index was written for")
    assert shards.verify(str(demo_shards)) == 48 + 21


def test_ddp_under_torchrun_trains_from_shards_with_rank0s_index(demo_shards, tmp_path):
    """Two ranks: rank 0 loads the index and broadcasts its arrays; each rank's loader worker reads
    its shards; exact validation counts every image once."""
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"), *TINY,
                "--workers", "1", "--epochs", "1", "--log-dir", tmp_path / "run", demo_shards], timeout=300)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path / "run")
    assert record["status"] == "finished" and record["dist"]["world_size"] == 2
    assert record["epochs"][-1]["val_samples"] == 21
    sums = record["final"]["weight_checksums"]
    assert len(sums) == 2 and sums[0] == sums[1]


def test_folder_index_packs_paths_after_their_common_folder():
    samples = [("/d/train/b/x.JPEG", 1), ("/d/train/a/y.JPEG", 0), ("/d/train/a/ü z.JPEG", 0)]
    index = sources.FolderIndex.from_samples(samples)
    assert index.prefix == "/d/train/" and index.paths.nbytes == len("b/x.JPEGa/y.JPEGa/ü z.JPEG".encode())
    assert [(index.name(i), index.target(i)) for i in range(3)] == samples
    assert index.targets.dtype == np.int32 and index.offsets.dtype == np.int64


@dali_colours.needs_dali
def test_dali_backend_reads_shards_like_the_folder(tmp_path):
    src = dali_colours.colour_dataset(tmp_path / "src")
    proc = convert(src, tmp_path / "s", "--shard-size", "0.002")
    assert proc.returncode == 0, explain(proc)
    got = {}
    for name, root in (("folder", src), ("shards", tmp_path / "s")):
        _, index = scan.scan_dataset(str(root))
        loader = dali_colours.dali_loader(index["val"], samplers.ShardSampler(dali_colours.VAL, 0, 1), False,
                                          dali_colours.CPU)
        got[name] = [(dali_colours.decode_id(im), int(t)) for images, targets in loader
                     for im, t in zip(images, targets)]
    assert got["shards"] == got["folder"] and len(got["folder"]) == dali_colours.VAL
