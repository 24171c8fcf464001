"""The dali backend on the CPU (DALI's CPU operators; the GPU path is in tests/engine/test_gpu.py).

Each JPEG is one flat colour that encodes its sample id, so a decoded, cropped and resized batch
still says which samples it holds: the tests check that DALI yields exactly the samples our
samplers choose, in their order, for training (shuffled, per rank, resumable mid-epoch) and for
validation (every image once across ranks, a short last batch).
"""
from __future__ import annotations

import sys

import pytest
import torch
from PIL import Image

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.common import errors
from hpc_imagenet.imagenet.data import samplers, scan
from hpc_imagenet.imagenet.data.decode import dali
from hpc_imagenet.imagenet.data.loader import build_loaders, set_epoch
from tests.engine.dali_colours import (CPU, TRAIN, VAL, check_solid_colour_batches, colour_dataset, dali_loader,
                                       decode_id, ids_in_scan_order, needs_dali)
from tests.helpers import explain, read_run, script
from tests.warm_start import warm_python


@needs_dali
def test_training_batches_follow_the_sampler_each_epoch(tmp_path):
    check_solid_colour_batches(tmp_path, CPU)


@needs_dali
def test_resume_mid_epoch_yields_the_rest_of_the_epoch(tmp_path):
    _, samples = scan.scan_dataset(str(colour_dataset(tmp_path)))
    ids = ids_in_scan_order(samples["train"])
    sampler = samplers.ResumableSampler(range(TRAIN), num_replicas=1, rank=0, shuffle=True, seed=5)
    full = [ids[i] for i in iter(sampler)]
    loader = dali_loader(samples["train"], sampler, True, CPU)
    set_epoch(loader, 0, samples_done=8)  # two batches of 4 already trained
    got = [decode_id(im) for images, _ in loader for im in images]
    assert got == full[8:]


@needs_dali
def test_validation_sees_every_image_once_across_ranks(tmp_path):
    _, samples = scan.scan_dataset(str(colour_dataset(tmp_path)))
    ids = ids_in_scan_order(samples["val"])
    seen, sizes = [], []
    for rank in (0, 1):
        loader = dali_loader(samples["val"], samplers.ShardSampler(VAL, rank, 2), False, CPU)
        pipes = []
        for _ in range(2):  # a second validation pass gives the same images, from the same pipeline
            batches = list(loader)
            sizes.append([len(t) for _, t in batches])
            pipes.append(loader.pipe)
        assert pipes[0] is pipes[1], "a validation pass rebuilt the pipeline (and restarted its reader processes)"
        seen += [decode_id(im) for images, _ in batches for im in images]
    assert sorted(seen) == sorted(ids) == list(range(VAL))
    assert sizes == [[4, 2], [4, 2], [4, 1], [4, 1]]


@needs_dali
def test_flip_happens_about_half_the_time(tmp_path):
    folder = tmp_path / "train" / "a"
    folder.mkdir(parents=True)
    half = Image.new("RGB", (64, 64), (0, 0, 0))
    half.paste((255, 255, 255), (32, 0, 64, 64))  # left black, right white
    half.save(folder / "x.jpg", quality=95)
    samples = [(str(folder / "x.jpg"), 0)] * 64
    loader = dali_loader(samples, samplers.ShardSampler(64, 0, 1), True, CPU, batch=16)
    flipped = [int(im[:, :, :4].float().mean() > im[:, :, -4:].float().mean()) for images, _ in loader for im in images]
    # a crop always keeps part of both halves only sometimes; count the crops whose edges differ
    assert len(flipped) == 64 and 0.25 < sum(flipped) / 64 < 0.75


@needs_dali
def test_reader_processes_are_forked_without_cuda_and_spawned_with_it(monkeypatch):
    assert dali.worker_start_method() == "fork"  # no CUDA here: forking is safe and ~4 s faster a pipeline
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # stands in for a GPU run's process
    assert dali.worker_start_method() == "spawn"


def test_missing_dali_is_one_line_naming_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali now raises ImportError
    cfg = config.parse(["--data-backend", "dali", "-b", "4", str(colour_dataset(tmp_path))], "nd")
    with pytest.raises(errors.DataError) as e:
        build_loaders(cfg, 0, 1, CPU)
    message = str(e.value)
    assert "\n" not in message and "pip install nvidia-dali-cuda130" in message


@needs_dali
def test_entry_script_trains_with_dali_on_cpu(tmp_path):
    root = colour_dataset(tmp_path / "data")
    proc = warm_python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "16", "-b", "4", "--workers", "1",
                  "--data-backend", "dali", "--epochs", "1", "--steps-per-epoch", "3", "--seed", "0",
                  "--log-dir", tmp_path / "run", root, timeout=600)
    assert proc.returncode == 0, explain(proc)
    run = read_run(tmp_path / "run")
    assert run["epochs"][0]["val_samples"] == VAL
    assert run["throughput"]["measured_steps"] + run["throughput"]["warmup_steps"] == 3
