"""The software and hardware a measurement ran on, as one JSON-ready dict.

Stored next to every number (run.json, benchmark records) so any figure can be traced and rerun:
versions of everything that decides the speed (torch, CUDA, the GPU driver, the decoding and AMP
libraries, the region decoder, the MPI library), devices, host and code revision.

``python -m hpc_imagenet.imagenet.run.sysinfo`` prints it: the check of an environment or a site image
(images/README.md); ``--require-gpu`` exits 1 where torch sees no GPU (a runtime that does not pass
the GPUs in), ``--json`` prints the dict.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import importlib.metadata
import importlib.util
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import torch

from hpc_imagenet.imagenet.common import checkout
from hpc_imagenet.launch import mpi as launch_mpi

log = logging.getLogger(__name__)

REPO_ROOT = checkout.root() or checkout.PACKAGE.parent  # the checkout; an install's site-packages has no git
NVIDIA_PROC = Path("/proc/driver/nvidia")  # the NVIDIA kernel driver's folder, present where it is loaded
# Libraries that decide decoding and mixed-precision speed: record key -> distributions that provide
# it (first installed wins). Read from the installed metadata: nothing is imported for this.
LIBRARIES = {
    "torchvision": ("torchvision",),
    "pillow": ("pillow", "pillow-simd"),
    "simplejpeg": ("simplejpeg",),
    "torchcodec": ("torchcodec",),
    "dali": ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110"),
    "nvimgcodec": ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12"),
    "apex": ("apex",),
    "mpi4py": ("mpi4py",),
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# What the harness and the studies write into the checkout while they measure (records, kept run folders, the
# reports, git pathspec globs): changes there do not make the measured code differ from its commit
HARNESS_OUTPUTS = ("results/records", "results/runs", "results/RESULTS.md", "results/reports", "studies/*/records/**",
                   "studies/*/RESULTS.md", "studies/*/figures/**")


def changed_files(root: Path = REPO_ROOT, untracked: bool = False) -> Optional[list]:
    """The files of ROOT's checkout that differ from its commit outside HARNESS_OUTPUTS (with UNTRACKED, files
    git neither tracks nor ignores too), as git names them; None where ROOT is no git checkout."""
    outside = [f":(exclude,glob){path}" for path in HARNESS_OUTPUTS]
    try:
        out = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                              f"--untracked-files={'normal' if untracked else 'no'}", "--", ".", *outside],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line[3:] for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else None


def git_commit(root: Path = REPO_ROOT) -> Optional[str]:
    """The checkout's commit, with ``-dirty`` when tracked files differ from it outside HARNESS_OUTPUTS (a
    sweep's own earlier records do not make its next run's tree dirty)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if changed_files(root) else "")


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def machine_id(boot_id: Path = BOOT_ID) -> Optional[str]:
    """This boot of this machine, as a 12-digit hash: the kernel draws a new boot id at every boot, so two
    virtual machines, or two leases of one GPU machine, never share it, while every run of one session on one
    machine does. The host name cannot tell them apart (every VM here is ``vm``); the id itself is not kept."""
    try:
        return hashlib.sha256(boot_id.read_bytes().strip()).hexdigest()[:12]
    except OSError:
        return None


def _repo_relative(arg: str) -> str:
    """ARG with this checkout's path made relative: records carry no machine's absolute paths."""
    root = str(REPO_ROOT) + os.sep
    return arg[len(root):] if arg.startswith(root) else arg


# What a measurement runs from the checkout: the engine and its launchers, the harness and the studies (a study's
# runner patches and times the programs it compares); the harness's scratch folder holds data, not code
SOURCE_DIRS = ("hpc_imagenet", "imagenet", "results", "studies")
SOURCE_SUFFIXES = (".py", ".sh", ".c")
NOT_SOURCE = ("results/scratch",)


def source_digest(root: Path = REPO_ROOT) -> str:
    """SHA-256 (first 12 hex digits) of the sources a measurement runs (SOURCE_DIRS' Python, shell and C files).

    Identifies the code that ran where the checkout's git state cannot: a copy sent to another
    machine keeps whatever .git it had, so its commit may predate the files. Records made before it
    covered results/ and studies/ hashed imagenet/ and launch/'s Python files alone.
    """
    h = hashlib.sha256()
    for path in sorted(_sources(root)):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _sources(root: Path) -> list:
    """SOURCE_DIRS' source files under ROOT; NOT_SOURCE is not walked (the scratch folder holds the photographs)."""
    found = []
    for top in SOURCE_DIRS:
        for folder, dirs, files in os.walk(root / top):
            here = Path(folder)
            dirs[:] = [d for d in dirs if (here / d).relative_to(root).as_posix() not in NOT_SOURCE]
            found += [here / f for f in files if Path(f).suffix in SOURCE_SUFFIXES]
    return found


def nvidia_driver(proc: Optional[Path] = None) -> Optional[str]:
    """This node's NVIDIA driver version, from the kernel module's /proc file, else nvidia-smi; None
    where neither exists (no NVIDIA GPU, or none visible to this container)."""
    try:
        text = ((proc or NVIDIA_PROC) / "version").read_text()
        found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    versions = out.stdout.split()
    return versions[0] if out.returncode == 0 and versions else None


def warn_if_gpus_unusable(proc: Optional[Path] = None) -> Optional[str]:
    """One warning line when this node has NVIDIA GPUs but this torch cannot use them (a CPU-only
    build, or a CUDA build newer than the driver); returns it (None when there is nothing to say)."""
    if torch.cuda.is_available():
        return None
    driver = nvidia_driver(proc)
    if driver is None:
        return None
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    line = (f"this node has NVIDIA GPUs (driver {driver}) but torch {torch.__version__} ({build}) cannot use "
            f"them, so this rank runs on the CPU: install the build for this driver (make setup TORCH=cu126, "
            f"cu128 or cu130; README: The torch build)")
    log.warning(line)
    return line


def libraries() -> Dict[str, Optional[str]]:
    """Installed versions of the decoding, AMP and MPI-binding libraries (None: not installed)."""
    found: Dict[str, Optional[str]] = {}
    for key, dists in LIBRARIES.items():
        found[key] = None
        for dist in dists:
            try:
                found[key] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return found


def region_decoder_built() -> bool:
    """Whether the fast backend's C region decoder (hpc_imagenet/imagenet/data/decode/_jpeg_region.c) is built here."""
    return importlib.util.find_spec("hpc_imagenet.imagenet.data.decode._jpeg_region") is not None


def _gpu_info() -> dict:
    if not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_count": 0, "gpu_memory_bytes": None}
    props = torch.cuda.get_device_properties(0)
    return {"gpu_name": props.name, "gpu_count": torch.cuda.device_count(),
            "gpu_memory_bytes": props.total_memory}


def _nccl_version() -> Optional[str]:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # no NCCL in this build / no CUDA
        return None


def collect(nodes: Optional[int] = None) -> dict:
    """Versions, devices, host and code revision of this process."""
    libs = libraries()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": libs["torchvision"],
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": cudnn,
        "nccl": _nccl_version() if torch.cuda.is_available() else None,
        "gpu_driver": nvidia_driver(),
        **_gpu_info(),
        "libraries": libs,
        "region_decoder_built": region_decoder_built(),
        # the MPI library of this process where hpc_imagenet.launch.mpi initialised one (never loaded just for this)
        "mpi": launch_mpi.loaded_library(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "machine_id": machine_id(),
        "nodes": nodes,
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "source_digest": source_digest(),
        "command": " ".join(_repo_relative(arg) for arg in sys.argv),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_imagenet.imagenet.run.sysinfo",
                                 description="what this environment (or "
                                 "image) carries for training: versions, devices, the optional libraries")
    ap.add_argument("--json", action="store_true", help="the whole record as one JSON object")
    ap.add_argument("--require-gpu", action="store_true", help="exit 1 when torch sees no CUDA GPU")
    args = ap.parse_args(argv)
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        libs = ", ".join(f"{k} {v or '-'}" for k, v in info["libraries"].items())
        print(f"python {info['python']}, torch {info['torch']} (CUDA {info['cuda'] or '-'}, cuDNN "
              f"{info['cudnn'] or '-'}, NCCL {info['nccl'] or '-'}); GPUs: {info['gpu_count']} "
              f"{info['gpu_name'] or ''}".rstrip())
        print(f"libraries: {libs}; fast backend's C decoder: {'built' if info['region_decoder_built'] else 'missing'}")
    if args.require_gpu and not info["cuda_available"]:
        print("error: torch sees no CUDA GPU here; in a container, pass the GPUs in (apptainer --nv, podman-hpc "
              "--gpu, ch-fromhost --nvidia on a Charliecloud image, Pyxis: enroot's NVIDIA hook)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from hpc_imagenet.imagenet.run.sysinfo import main  # under its one name, not a copy
    sys.exit(main())
