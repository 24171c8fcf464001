"""hpc_imagenet.imagenet.run.sysinfo: what a run records about the software that decides its speed, and the one
line a rank prints when its node has NVIDIA GPUs that this torch cannot use.

There is no NVIDIA GPU or driver on the CPU machines, so the driver is a stand-in: a fake
/proc/driver/nvidia/version (the file the kernel module writes) or an ``nvidia-smi`` shim on PATH
that prints what the real one prints for ``--query-gpu=driver_version --format=csv,noheader``."""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
import torch

from hpc_imagenet.imagenet.run import distributed, sysinfo

PROC_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
                "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\nGCC version:  gcc version 12.2.0\n")


@pytest.fixture
def no_nvidia(tmp_path, monkeypatch):
    """This machine as it is: no driver folder, no nvidia-smi."""
    monkeypatch.setattr(sysinfo, "NVIDIA_PROC", tmp_path / "no-driver")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return tmp_path


def fake_proc(root: Path, text: str = PROC_VERSION) -> Path:
    (root / "nvidia").mkdir()
    (root / "nvidia" / "version").write_text(text)
    return root / "nvidia"


def shim_nvidia_smi(bin_dir: Path, monkeypatch, output: str = "535.104.05\n535.104.05\n") -> None:
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ \"$1\" = --query-gpu=driver_version ] || exit 9\nprintf '{output}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_driver_from_proc_then_nvidia_smi(no_nvidia, monkeypatch):
    assert sysinfo.nvidia_driver() is None
    assert sysinfo.nvidia_driver(fake_proc(no_nvidia)) == "550.54.15"
    old_format = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024\n"
    (no_nvidia / "old").mkdir()
    (no_nvidia / "old" / "version").write_text(old_format)
    assert sysinfo.nvidia_driver(no_nvidia / "old") == "470.256.02"
    shim_nvidia_smi(no_nvidia / "bin", monkeypatch)
    assert sysinfo.nvidia_driver() == "535.104.05"  # no /proc file: nvidia-smi's answer


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch uses the GPUs")
def test_gpu_less_torch_on_a_gpu_node_says_so_in_one_line(no_nvidia, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.imagenet.run.sysinfo"):
        assert distributed.pick_device(0) == torch.device("cpu")
    assert caplog.records == []  # no NVIDIA driver here: nothing to say
    monkeypatch.setattr(sysinfo, "NVIDIA_PROC", fake_proc(no_nvidia))
    with caplog.at_level(logging.WARNING, logger="hpc_imagenet.imagenet.run.sysinfo"):
        distributed.pick_device(1)  # not the node's first rank: quiet
        assert caplog.records == []
        distributed.pick_device(0)
    [record] = caplog.records
    line = record.getMessage()
    assert "\n" not in line
    assert line.startswith(f"this node has NVIDIA GPUs (driver 550.54.15) but torch {torch.__version__} (")
    assert "cannot use them" in line and "make setup TORCH=cu126, cu128 or cu130" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch uses the GPUs")
def test_nvidia_smi_alone_is_enough_to_warn(no_nvidia, monkeypatch):
    shim_nvidia_smi(no_nvidia / "bin", monkeypatch)
    assert "driver 535.104.05" in sysinfo.warn_if_gpus_unusable()


def test_record_names_driver_libraries_decoder_and_mpi(no_nvidia, monkeypatch):
    import importlib.metadata

    info = sysinfo.collect(nodes=1)
    assert info["gpu_driver"] is None
    libs = info["libraries"]
    assert set(libs) == set(sysinfo.LIBRARIES)
    assert libs["pillow"] == importlib.metadata.version("pillow")
    assert libs["torchvision"] == info["torchvision"] == importlib.metadata.version("torchvision")
    assert libs["apex"] is None or isinstance(libs["apex"], str)
    decode_dir = sysinfo.REPO_ROOT / "hpc_imagenet" / "imagenet" / "data" / "decode"
    assert info["region_decoder_built"] == any(decode_dir.glob("_jpeg_region*.so"))
    monkeypatch.setattr(sysinfo, "NVIDIA_PROC", fake_proc(no_nvidia))
    bench = sysinfo.REPO_ROOT / "hpc_imagenet" / "harness" / "bench.py"
    monkeypatch.setattr("sys.argv", [str(bench), "region", "/data/x"])
    info = sysinfo.collect()
    assert info["gpu_driver"] == "550.54.15"
    assert info["command"] == "hpc_imagenet/harness/bench.py region /data/x"  # no machine's checkout path in a record
