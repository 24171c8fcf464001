"""The Debian packages the project takes from the distribution (SLURM, munge, MariaDB and Open MPI for
the local cluster and the MPI tests, Fashion-MNIST's photographs for the time-to-accuracy tests),
installed with apt-get where they are missing (as root), one installer at a time.

System software comes from the distribution, never from a wheel in the project's venv: an MPI wheel
there would shadow a site MPI in a user's venv the same way.

Two processes that install at once (two local clusters started by two test workers or two terminals)
would race on dpkg's lock, and the loser's apt-get fails at once. So every install here takes the
project's own lock first (a root-only file in /run), then looks again at what is missing: the second
process waits and finds the first one's packages in place. apt-get itself also waits (up to
``APT_LOCK_WAIT_S``) for a lock held by anybody else (an unattended upgrade, a user's apt).

Its command line (``system_packages.py``) is what ``make test-system-deps`` and CI run.
"""
from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

from hpc_imagenet.slurm.localcluster.commands import ClusterError, which

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix-dev")
# Debian's pmix plugin (slurm-wlm-basic-plugins, mpi_pmix_v4.so) dlopens this unversioned library at
# step launch; only libpmix-dev ships it, and no slurm package depends on it: without it every
# `srun --mpi=pmix` task fails to launch
PMIX_LIBRARY = "/usr/lib/*/pmix2/lib/libpmix.so"
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server-core", "mariadb-client-core")
BINARIES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "munged": "munge"}
ACCOUNTING_BINARIES = {"slurmdbd": "slurmdbd", "mariadbd": "mariadb-server-core",
                       "mariadb-install-db": "mariadb-server-core"}
OPENMPI_PACKAGES = ("openmpi-bin", "libopenmpi-dev")
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
# what `make test-system-deps` installs, by what needs it; CI removes all but `build` first so that a
# missing install step fails CI instead of passing on a machine that earlier work left ready
SETS: Dict[str, Tuple[str, ...]] = {
    "build": ("gcc", "libc6-dev", "libjpeg-dev"),  # the fast backend's C region decoder (setup.py)
    "slurm": PACKAGES, "accounting": ACCOUNTING_PACKAGES, "openmpi": OPENMPI_PACKAGES,
    "fashion-mnist": (FASHION_MNIST_PACKAGE,),
    # the container tier: Charliecloud's ch-run, and debootstrap for the image it runs (localcluster/image.py)
    "containers": ("charliecloud-runtime", "debootstrap"),
    # Podman-HPC on the test cluster (localcluster/podman.py), for `make test-images` only: podman with runc,
    # podman-hpc's fuse-overlayfs-wrap (fuse-overlayfs, squashfuse, inotifywait) and the headers of the static
    # mksquashfs that its migrate runs inside an image
    "podman": ("podman", "runc", "fuse-overlayfs", "squashfuse", "inotify-tools", "liblz4-dev", "zlib1g-dev"),
}
# sets that `install` and `missing` leave out unless named: `make test-system-deps` (and so `make test`) does
# without them
OPTIONAL = ("podman",)

APT_LOCK_WAIT_S = 600
# root-only (/run is 0755 root): no other user can plant the lock and hold every install back
INSTALL_LOCK = Path("/run/hpc-imagenet-install.lock")
# present while apt-get runs: packages' init scripts must not start system-wide daemons
POLICY_RC = Path("/usr/sbin/policy-rc.d")


def _apt(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=APT_LOCK_WAIT_S + 600)


def can_install() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def by_hand(packages: Sequence[str]) -> str:
    return f"sudo apt-get update && sudo apt-get install -y --no-install-recommends {' '.join(packages)}"


@contextmanager
def install_lock() -> Iterator[None]:
    """Hold the project's install lock; say once on stderr when another process holds it."""
    with open(INSTALL_LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another package install to finish ({INSTALL_LOCK})", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def apt_install(packages: Sequence[str]) -> None:
    """apt-get install PACKAGES (idempotent), after an update if the first try fails; packages'
    init scripts are kept from starting system-wide daemons. The caller holds ``install_lock``.
    Raises RuntimeError with one line naming the packages and the command to run by hand."""
    policy = POLICY_RC
    made_policy = not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        install = ["apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}", "install", "-y", "-q",
                   "--no-install-recommends", *packages]
        if _apt(install).returncode != 0:
            _apt(["apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}", "update", "-q"])
            done = _apt(install)
            if done.returncode != 0:
                errors = [line for line in done.stderr.splitlines() if line.startswith("E:")] or [done.stderr.strip()]
                raise RuntimeError(f"apt-get could not install {' '.join(packages)} ({errors[0].strip()[:200]}): "
                                   f"run {by_hand(packages)}")
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)


def install(packages: Sequence[str], missing: Callable[[], Sequence[str]]) -> None:
    """Install PACKAGES when MISSING() names anything, one installer at a time: a process that waited
    for another's install looks again before it installs. RuntimeError (one line, the packages and
    the command to run by hand) when apt-get fails or something is still missing after it."""
    if not missing():
        return
    if not can_install():
        raise RuntimeError(f"missing {', '.join(missing())} and cannot install here (needs root and apt-get): "
                           f"run {by_hand(packages)}")
    with install_lock():
        if not missing():
            return
        apt_install(packages)
    left = missing()
    if left:
        raise RuntimeError(f"still missing after apt-get install {' '.join(packages)}: {', '.join(left)}; "
                           f"run {by_hand(packages)}")


def missing_packages(accounting: bool = True) -> List[str]:
    """The SLURM packages (with ACCOUNTING: slurmdbd and MariaDB too) whose programs are not here."""
    wanted = {**BINARIES, **(ACCOUNTING_BINARIES if accounting else {})}
    missing = {package for binary, package in wanted.items() if not which(binary)}
    return sorted(missing | (set() if glob.glob(PMIX_LIBRARY) else {"libpmix-dev"}))


def ensure_packages(accounting: bool = True) -> None:
    """apt-get install the SLURM packages that are missing (idempotent, no daemon auto-start)."""
    try:
        install([*PACKAGES, *(ACCOUNTING_PACKAGES if accounting else ())], lambda: missing_packages(accounting))
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from None


def system_mpirun() -> str:
    """The system's Open MPI mpirun (installing Debian's openmpi-bin where missing); the venv's bin
    is left out of the search so an MPI wheel there is never picked up."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = os.pathsep.join(folder for folder in os.environ.get("PATH", "").split(os.pathsep)
                           if folder and os.path.abspath(folder) != venv_bin)
    def ompi_info() -> str:
        return shutil.which("ompi_info", path=path) or ""

    if not ompi_info() and can_install():
        install(OPENMPI_PACKAGES, lambda: [] if ompi_info() else list(OPENMPI_PACKAGES))
    if not ompi_info():
        raise FileNotFoundError("no system Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    return str(Path(ompi_info()).with_name("mpirun"))


def openmpi_library(mpirun: str) -> str:
    """The libmpi.so of the Open MPI that MPIRUN belongs to (ompi_info --path libdir)."""
    out = subprocess.run([str(Path(mpirun).with_name("ompi_info")), "--path", "libdir"], capture_output=True,
                         text=True, timeout=60).stdout
    libdir = out.split(":", 1)[1].strip() if ":" in out else ""
    library = Path(libdir) / "libmpi.so"
    if not library.exists():
        raise FileNotFoundError(f"ompi_info names no libmpi.so (got {out.strip()!r})")
    return str(library)


def dpkg_missing(packages: Sequence[str]) -> List[str]:
    """Those of PACKAGES that dpkg does not list as installed."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
                         capture_output=True, text=True, timeout=60).stdout
    installed = {line.split()[0].split(":")[0] for line in out.splitlines() if line.endswith(" installed")}
    return [package for package in packages if package not in installed]


def remove(packages: Sequence[str]) -> List[str]:
    """Purge those of PACKAGES that are installed, and what only they needed (apt-get autoremove), as a
    new machine is without them; returns the ones removed."""
    present = [package for package in packages if package not in dpkg_missing(packages)]
    if present:
        with install_lock():
            for cmd in (["purge", "-y", "-q", *present], ["autoremove", "--purge", "-y", "-q"]):
                done = _apt(["apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}", *cmd])
                if done.returncode != 0:
                    raise RuntimeError(f"apt-get {' '.join(cmd)} failed: {done.stderr.strip()[-200:]}")
    return present

