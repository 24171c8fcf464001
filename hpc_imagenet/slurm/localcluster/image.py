"""Container images for the test cluster, built here without a registry, and cached.

Both are Debian's own minimal root filesystem (``debootstrap --variant=minbase``) of this machine's release
with its Python, as a directory: what Charliecloud's ``ch-run`` runs, and what ``podman import`` reads. Like an
image that ``ch-convert`` or ``ch-image`` made, each has the mount points ``/mnt/0``..``/mnt/9`` and an
environment file ``/ch/environment`` (ch-run(1)).

- ``ensure()``: the light image. The project's Python packages are not in it: a job mounts the checkout and
  puts its venv's site-packages on ``PYTHONPATH``, so the image needs the venv's Python minor version, which
  this machine's release gives. About a minute and a half to build.
- ``ensure_torch()``: an image like NVIDIA's NGC PyTorch one: its own Python environment (``/opt/pytorch``)
  with torch and torchvision at the bottom of the project's supported window (``TORCH``) and the project's
  other dependencies installed inside it, Lightning added as a user's own image adds it (``USER_PACKAGES``: NGC's
  image has none), its own variables in ``/ch/environment``, and none of the host's folders. A job mounts only
  the checkout and the data. Building downloads the PyTorch wheels (~3 GB; pip's cache on this machine is used),
  a few minutes.

Images are kept under ``/var/cache/hpc-imagenet/images`` and reused by every later run; a marker written last
tells a finished build from one that stopped.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.packages import install_lock

CACHE = Path("/var/cache/hpc-imagenet/images")
PACKAGES = ("python3", f"libpython3.{sys.version_info.minor}")
MIRROR_ENV = "HPC_IMAGENET_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# ch-run shares the host's network, so it binds the host's name resolution over the image's, but only where
# the image has the files; debootstrap's minimal system has no /etc/hosts (the cluster's node names are there)
HOST_FILES = ("etc/hosts", "etc/resolv.conf")
READY = ".hpc-imagenet-image"  # written last: an image without it is a build that did not finish
BUILD_TIMEOUT_S = 900
VERSION = 2  # of the layout (mount points, /ch/environment): an older cached image is rebuilt
# the torch image: the oldest torch the project supports (NGC PyTorch 25.01's), and the project's other needs
TORCH = ("torch==2.6.0", "torchvision==0.21.0")
USER_PACKAGES = ("lightning>=2.4,<3",)  # what a user's image adds on top of NGC's for a Lightning script
TORCH_ENV = Path("/opt/pytorch")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TORCH_VARIABLES = {"PATH": f"{TORCH_ENV}/bin:{BASE_PATH}", "PYTORCH_VERSION": TORCH[0].split("==")[1],
                   "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "HPC_IMAGENET_IMAGE": "ngc-like"}
PIP_TIMEOUT_S = 1800
# python3 -m venv with pip (debootstrap does not resolve an --include's dependencies: named one by one)
VENV_PACKAGES = (f"python3.{sys.version_info.minor}-venv", "python3-distutils",
                 "python3-pip-whl", "python3-setuptools-whl")



def debian_mirror() -> str:
    """The Debian archive the root filesystems and source packages come from: $HPC_IMAGENET_DEBIAN_MIRROR, else
    the one this machine's apt already uses (its main archive in sources.list.d), else Debian's default."""
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in sources.read_text(errors="replace").splitlines():
            if line.startswith("URIs:") and line.split()[1:] and line.split()[1].rstrip("/").endswith("/debian"):
                return line.split()[1]
    return DEFAULT_MIRROR

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
    """The cached light image (built first where missing), with a folder at each of MOUNT_POINTS (absolute paths
    outside /tmp that the tests bind at their host paths: ch-run mounts the image read-only)."""
    image = cache / f"{release()}-python3.{sys.version_info.minor}-v{VERSION}"
    with install_lock():  # one builder at a time; the others find its image
        if not (image / READY).exists():
            _build(image, PACKAGES, {"PATH": BASE_PATH})
        for path in mount_points:
            (image / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return image


def ensure_torch(repo: Path, cache: Path = CACHE) -> Path:
    """The cached NGC-like image (built first where missing): its own Python with TORCH and the dependencies of
    REPO's requirements.txt and USER_PACKAGES, nothing of the host's."""
    image = cache / f"{release()}-torch{TORCH[0].split('==')[1]}-lightning-v{VERSION}"
    with install_lock():
        if not (image / READY).exists():
            _build(image, (*PACKAGES, *VENV_PACKAGES), TORCH_VARIABLES,
                   lambda partial: _install_torch(partial, repo))
    return image


def _build(image: Path, packages: Sequence[str], variables: dict, then=None) -> None:
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not os.path.exists(debootstrap):
        raise ClusterError("debootstrap is missing: make test-system-deps installs it (set 'containers')")
    partial = image.with_name(image.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    cmd = [debootstrap, "--variant=minbase", f"--include={','.join(packages)}", release(), str(partial),
           debian_mirror()]
    _run(cmd, BUILD_TIMEOUT_S, f"check the network to the Debian mirror, or set {MIRROR_ENV}")
    for name in HOST_FILES:  # ch-run binds the host's copy only over a file the image has
        (partial / name).touch()
    for n in range(10):  # the mount points ch-image and ch-convert give an image (ch-run(1))
        (partial / "mnt" / str(n)).mkdir(parents=True, exist_ok=True)
    (partial / "ch").mkdir(exist_ok=True)
    (partial / "ch" / "environment").write_text("".join(f"{k}={v}\n" for k, v in variables.items()))
    if then:
        then(partial)
    (partial / READY).write_text(" ".join(cmd) + "\n")
    shutil.rmtree(image, ignore_errors=True)
    partial.rename(image)


def _install_torch(partial: Path, repo: Path) -> None:
    """A venv in the image, made and filled by the image's own Python (ch-run -w: the image read-write), from
    PyPI; the host's pip cache is bound in so that a second build downloads nothing."""
    cache = Path.home() / ".cache" / "pip"
    cache.mkdir(parents=True, exist_ok=True)
    needs = [line.split("#", 1)[0].strip() for line in (repo / "requirements.txt").read_text().splitlines()]
    needs = [n for n in needs if n and not n.startswith(("torch", "torchvision"))]
    env = {"PATH": BASE_PATH, "USER": os.environ.get("USER", "root"), "HOME": "/root"}  # no PIP_* of the host
    binds = ["-b", f"{cache}:/mnt/0"]
    cert = []  # a site's own certificate authority (a proxy's), as the host's pip is told: bound for the build only
    host_cert = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if host_cert and os.path.isfile(host_cert):
        binds += ["-b", f"{os.path.dirname(host_cert)}:/mnt/1"]
        cert = ["--cert", f"/mnt/1/{os.path.basename(host_cert)}"]
    ch_run = ["ch-run", "-w", *binds, str(partial), "--"]
    _run([*ch_run, f"python3.{sys.version_info.minor}", "-m", "venv", str(TORCH_ENV)], 300,
         "the image's Python could not make a venv", env)
    _run([*ch_run, str(TORCH_ENV / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", "--cache-dir",
          "/mnt/0", *cert, "--index-url", "https://pypi.org/simple", *TORCH, *needs, *USER_PACKAGES], PIP_TIMEOUT_S,
         "check the network to PyPI", env)


def _run(cmd: Sequence[str], timeout: int, hint: str, env=None) -> None:
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"building the test image: {cmd[0]} ran past {timeout} s; {hint}") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise ClusterError(f"building the test image failed ({' | '.join(tail)}); {hint}")
