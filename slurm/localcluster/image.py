"""A container image for the test cluster, built here without a registry, and cached.

The image is Debian's own minimal root filesystem (``debootstrap --variant=minbase``) of this
machine's release with its Python, as a directory: what Charliecloud's ``ch-run`` runs (a site would
build its image from NGC's PyTorch container instead: docs/slurm.md, "Containers"). The project's
Python packages are not installed in it: the jobs mount the checkout and put its venv's
site-packages on ``PYTHONPATH``, so the image needs the same Python minor version as the venv, which
this machine's release gives. Building takes about a minute and a half (the packages come from the
distribution's mirror, which this machine reaches like apt does); the image is kept under
``/var/cache/hpc-imagenet/images`` and reused by every later run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from slurm.localcluster.commands import ClusterError
from slurm.localcluster.packages import install_lock

CACHE = Path("/var/cache/hpc-imagenet/images")
PACKAGES = ("python3", f"libpython3.{sys.version_info.minor}")
MIRROR_ENV = "HPC_IMAGENET_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# ch-run shares the host's network, so it binds the host's name resolution over the image's, but only where
# the image has the files; debootstrap's minimal system has no /etc/hosts (the cluster's node names are there)
HOST_FILES = ("etc/hosts", "etc/resolv.conf")
READY = ".hpc-imagenet-image"  # written last: an image without it is a build that did not finish
BUILD_TIMEOUT_S = 900


def release() -> str:
    """This machine's Debian release name (bookworm), from /etc/os-release."""
    fields = dict(line.rstrip("\n").split("=", 1) for line in Path("/etc/os-release").read_text().splitlines()
                  if "=" in line)
    name = fields.get("VERSION_CODENAME", "").strip('"')
    if fields.get("ID", "").strip('"') != "debian" or not name:
        raise ClusterError("the test image is Debian's root filesystem of this machine's release, and this machine "
                           "is not Debian")
    return name


def ensure(mount_points: Iterable[str] = (), cache: Path = CACHE) -> Path:
    """The cached image (built first where missing), with a folder at each of MOUNT_POINTS (absolute paths
    outside /tmp that jobs bind-mount: ch-run mounts the image read-only and makes no folders in it)."""
    image = cache / f"{release()}-python3.{sys.version_info.minor}"
    with install_lock():  # one builder at a time; the others find its image
        if not (image / READY).exists():
            _build(image)
        for path in mount_points:
            (image / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return image


def _build(image: Path) -> None:
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not os.path.exists(debootstrap):
        raise ClusterError("debootstrap is missing: make test-system-deps installs it (set 'containers')")
    partial = image.with_name(image.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    cmd = [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", release(), str(partial),
           os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise ClusterError(f"building the test image failed ({' | '.join(tail)}); check the network to the Debian "
                           f"mirror, or set {MIRROR_ENV}")
    for name in HOST_FILES:  # ch-run binds the host's copy only over a file the image has
        (partial / name).touch()
    (partial / READY).write_text(" ".join(cmd) + "\n")
    shutil.rmtree(image, ignore_errors=True)
    partial.rename(image)
