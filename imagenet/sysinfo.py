"""The software and hardware a measurement ran on, as one JSON-ready dict.

Stored next to every number (run.json, benchmark records) so any figure can be traced and rerun.
"""
from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(root: Path = REPO_ROOT) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def source_digest(root: Path = REPO_ROOT) -> str:
    """SHA-256 (first 12 hex digits) of the engine's and launchers' Python sources.

    Identifies the code that ran where the checkout's git state cannot: a copy sent to another
    machine keeps whatever .git it had, so its commit may predate the files.
    """
    h = hashlib.sha256()
    for path in sorted(p for pkg in ("imagenet", "launch") for p in (root / pkg).rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


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
    try:
        import torchvision
        tv = torchvision.__version__
    except Exception:
        tv = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": tv,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": cudnn,
        "nccl": _nccl_version() if torch.cuda.is_available() else None,
        **_gpu_info(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "nodes": nodes,
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "source_digest": source_digest(),
        "command": " ".join(sys.argv),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
