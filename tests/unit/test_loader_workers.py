"""Loader workers start forked on Linux under every launcher: in a rank that pytorch/examples' --dist-url
launch spawned (start method "spawn") as under torchrun (the platform's default), so that no worker imports
torch and the engine again."""
from __future__ import annotations

import pytest
import torch

from hpc_imagenet.imagenet.data import loader


def _tiny_loader(workers: int):
    data = torch.utils.data.TensorDataset(torch.arange(8))
    return loader._loader(data, torch.utils.data.SequentialSampler(data), 4, workers, False, False, None)


def test_a_spawned_ranks_loader_forks_its_workers(monkeypatch):
    monkeypatch.setattr(loader.sys, "platform", "linux")
    monkeypatch.setattr(loader.multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert loader.worker_start_method() == "fork"
    assert _tiny_loader(2).multiprocessing_context.get_start_method() == "fork"


@pytest.mark.parametrize("platform, method", [("linux", None), ("linux", "forkserver"), ("darwin", "spawn")])
def test_the_platforms_default_stays_elsewhere(monkeypatch, platform, method):
    monkeypatch.setattr(loader.sys, "platform", platform)
    monkeypatch.setattr(loader.multiprocessing, "get_start_method", lambda allow_none=False: method)
    assert loader.worker_start_method() is None


def test_a_loader_without_workers_names_no_context():
    assert _tiny_loader(0).multiprocessing_context is None
