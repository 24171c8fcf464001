"""Podman-HPC for the test cluster, set up as a site would, and the NGC-like image brought in and migrated once.

What a site does, done here under one folder of the project's own (``ROOT``; nothing under /etc is touched):

- Debian's ``podman`` with ``runc`` (crun refuses this machine's hybrid cgroups) and ulimits within the
  machine's hard limits (podman's defaults are refused by ``setrlimit``), in a ``containers.conf`` that
  ``CONTAINERS_CONF`` names;
- PyPI's ``podman-hpc`` in a venv of its own, configured by a ``podman_hpc.yaml`` (``PODMANHPC_CONFIG_FILE``):
  its ``fuse-overlayfs-wrap`` and modules, a node store (``graph_root``) apart from the login node's;
- the squashed-image store (``SQUASH_DIR``) that compute nodes read: ``podman-hpc migrate`` squashes an image
  by running ``mksquashfs`` inside it, so it needs a statically linked one that knows ``-xattrs-exclude``
  (squashfs-tools >= 4.6; Debian 12 ships a dynamic 4.5.1). It is built here from Debian 13's source
  package (fetched with apt-get), gzip and lz4 only: what migrate uses;
- the NGC-like image (``image.ensure_torch``) imported from its root filesystem into the login node's store
  with its own variables (``podman import --change ENV``), migrated, then dropped from the login store: the
  compute nodes see it only through the squashed store, as on a real cluster.

Everything is kept and reused; a marker written last tells a finished import and migration from one that
stopped. The system packages come from ``make test-images`` (``packages.SETS['podman']``).
"""
from __future__ import annotations

import getpass
import os
import resource
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Sequence

from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster import image
from hpc_imagenet.slurm.localcluster.image import READY, TORCH_VARIABLES
from hpc_imagenet.slurm.localcluster.packages import SETS, dpkg_missing, install_lock

ROOT = Path("/var/cache/hpc-imagenet/podman")
RUN_ROOT = Path("/run/hpc-imagenet-podman")  # podman's run state belongs on a tmpfs: gone after a reboot
PODMAN_HPC = "podman-hpc==1.2.2"
SQUASHFS_SOURCE = ("squashfs-tools", "trixie")  # the first Debian release with squashfs-tools 4.6
NPROC = 4096  # runc was refused this machine's own hard limit (96367) for nproc: "operation not permitted"
TIMEOUT_S = 1800
# import writes the image into the login store and migrate squashes a second copy before the first is dropped
IMPORT_COPIES = 2
COMMANDS = ("podman-hpc", "fuse-overlayfs-wrap")  # what podman-hpc's venv gives the nodes


@dataclass(frozen=True)
class PodmanHpc:
    """podman-hpc as the test cluster's nodes run it: the variables a job needs (a site sets them in its module
    or /etc) and the image's name as ``podman-hpc images`` lists it."""
    root: Path
    image: str

    def env(self) -> Dict[str, str]:
        return {"PATH": f"{self.root / 'bin'}:{os.environ.get('PATH', '')}",
                "CONTAINERS_CONF": str(self.root / "containers.conf"),
                "PODMANHPC_CONFIG_FILE": str(self.root / "podman_hpc.yaml"),
                "SQUASH_DIR": str(self.root / "squash")}

    def command_env(self) -> Dict[str, str]:
        """This process's environment with env(), for podman-hpc run from here (it reads $USER)."""
        return {**os.environ, "USER": os.environ.get("USER") or getpass.getuser(), **self.env()}

    def login_env(self) -> Dict[str, str]:
        """The login node's store, where images are imported before migrate squashes them."""
        return {**self.command_env(), "PODMANHPC_GRAPH_ROOT": str(self.root / "login-storage"),
                "PODMANHPC_RUN_ROOT": str(RUN_ROOT / "login")}


def ensure(torch_image: Path, root: Path = ROOT) -> PodmanHpc:
    """podman-hpc set up under ROOT with TORCH_IMAGE (a directory image) imported and migrated, each step done
    once and reused."""
    missing = dpkg_missing(SETS["podman"])
    if missing:
        raise ClusterError(f"missing {' '.join(missing)}: make test-images installs them (set 'podman')")
    site = PodmanHpc(root, f"localhost/hpc-imagenet-ngc-like:{torch_image.name}")
    with install_lock():
        _venv(root)
        _mksquashfs(root)
        _configure(root)
        # which build of the directory image was migrated: a rebuilt one (same name) is brought in again
        build = f"{site.image} {(torch_image / READY).stat().st_mtime_ns}\n"
        marker = root / f"{torch_image.name}.migrated"
        if not marker.exists() or marker.read_text() != build or site.image not in _listed(site):
            _import_and_migrate(site, torch_image)
            marker.write_text(build)
    return site


def _venv(root: Path) -> None:
    """podman-hpc in a venv of its own; only its commands go on the jobs' PATH (ROOT/bin), not the venv's python."""
    venv = root / "venv"
    if not (venv / "bin" / "podman-hpc").exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], "making podman-hpc's venv")
        _run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", PODMAN_HPC],
             "pip install podman-hpc; check the network to PyPI")
    (root / "bin").mkdir(exist_ok=True)
    for name in COMMANDS:
        link = root / "bin" / name
        if not link.is_symlink():
            link.symlink_to(venv / "bin" / name)


def _mksquashfs(root: Path) -> None:
    """A static mksquashfs 4.6 (see the module's docstring), from Debian's source package."""
    target = root / "bin" / "mksquashfs.static"
    if target.exists():
        return
    package, suite = SQUASHFS_SOURCE
    work = root / "squashfs-build"
    shutil.rmtree(work, ignore_errors=True)
    (work / "sources").mkdir(parents=True)
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "sources" / "source.sources").write_text(
        f"Types: deb-src\nURIs: {image.debian_mirror()}\nSuites: {suite}\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    apt = ["apt-get", "-q", "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={work}/sources",
           "-o", f"Dir::State::Lists={work}/lists"]
    _run([*apt, "update"], "apt-get update for Debian's source packages", cwd=work)
    _run([*apt, "source", "--download-only", package], f"apt-get source {package}", cwd=work)
    with tarfile.open(next(work.glob(f"{package}_*.orig.tar.gz"))) as archive:
        archive.extractall(work, filter="data")
    source = next(work.glob(f"{package}-*/squashfs-tools"))
    _run(["make", "-j2", "GZIP_SUPPORT=1", "LZ4_SUPPORT=1", "XZ_SUPPORT=0", "LZO_SUPPORT=0", "ZSTD_SUPPORT=0",
          "EXTRA_LDFLAGS=-static", "mksquashfs"], "building a static mksquashfs", cwd=source)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "mksquashfs", target.with_suffix(".partial"))
    target.with_suffix(".partial").rename(target)
    shutil.rmtree(work)


def _configure(root: Path) -> None:
    """containers.conf and podman_hpc.yaml, rewritten each time (cheap; a changed limit is picked up)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = min(NPROC, resource.getrlimit(resource.RLIMIT_NPROC)[1])
    (root / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={soft}:{hard}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n')
    (root / "hooks.d").mkdir(exist_ok=True)
    venv = root / "venv"
    settings = {"podman_bin": shutil.which("podman") or "/usr/bin/podman",
                "mount_program": venv / "bin" / "fuse-overlayfs-wrap",
                "modules_dir": venv / "etc" / "podman_hpc" / "modules.d", "hooks_dir": root / "hooks.d",
                "mksquashfs_bin": root / "bin" / "mksquashfs.static",
                "graph_root": root / "node-storage", "run_root": RUN_ROOT / "node", "config_home": root / "config"}
    (root / "podman_hpc.yaml").write_text("".join(f'{k}: "{v}"\n' for k, v in settings.items()))


def require_room(torch_image: Path, root: Path) -> None:
    """ClusterError, before an import that would fill the disk (podman then fails with a line that hides why),
    where ROOT's filesystem has less free than IMPORT_COPIES copies of TORCH_IMAGE."""
    needed = IMPORT_COPIES * sum(f.lstat().st_size for f in torch_image.rglob("*") if not f.is_symlink())
    free = shutil.disk_usage(root).free
    if free < needed:
        raise ClusterError(f"importing the NGC-like image needs {needed / 2**30:.1f} GiB free under {root}, which "
                           f"has {free / 2**30:.1f} GiB: free some space (old checkouts, their .venv), then rerun")


def _import_and_migrate(site: PodmanHpc, torch_image: Path) -> None:
    require_room(torch_image, site.root)
    env = site.login_env()
    changes = [arg for k, v in TORCH_VARIABLES.items() for arg in ("--change", f"ENV {k}={v}")]
    tar = subprocess.Popen(["tar", "-C", str(torch_image), "--exclude", "./ch", "-c", "."],
                           stdout=subprocess.PIPE)
    try:
        _run(["podman-hpc", "import", *changes, "-", site.image], "podman-hpc import of the NGC-like image",
             env=env, stdin=tar.stdout)
    finally:
        tar.stdout.close()
        tar.wait()
    _run(["podman-hpc", "migrate", site.image], "podman-hpc migrate of the NGC-like image", env=env)
    if site.image not in _listed(site):  # migrate logs its failure and still exits 0
        raise ClusterError(f"podman-hpc migrate left no {site.image} in {site.env()['SQUASH_DIR']} (run it by hand "
                           "with --log-level info to see why)")
    _run(["podman-hpc", "rmi", site.image], "dropping the login store's copy", env=env)


def _listed(site: PodmanHpc) -> Sequence[str]:
    """The images a compute node sees (its own store and the squashed one)."""
    done = subprocess.run(["podman-hpc", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                          text=True, env=site.command_env(), timeout=120)
    return done.stdout.split() if done.returncode == 0 else []


def _run(cmd: Sequence[str], what: str, env=None, cwd=None, stdin=None) -> None:
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=cwd,
                              stdin=stdin)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{what}: {cmd[0]} ran past {TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise ClusterError(f"{what} failed ({' | '.join(tail)})")
