"""Install the Debian packages a test needs with apt-get, where they are missing (as root).

The tests take system software (SLURM, Open MPI) from the distribution, never from a wheel in the
project's venv: an MPI wheel there would shadow a site MPI in a user's venv the same way.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

OPENMPI_PACKAGES = ("openmpi-bin", "libopenmpi-dev")


def _apt(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=600)


def can_install() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(packages: Sequence[str]) -> None:
    """apt-get install PACKAGES (idempotent), after an update if the first try fails; packages'
    init scripts are kept from starting system-wide daemons. Raises RuntimeError on failure."""
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
        if _apt(install).returncode != 0:
            _apt(["apt-get", "update", "-q"])
            done = _apt(install)
            if done.returncode != 0:
                raise RuntimeError(f"apt-get install {' '.join(packages)} failed: {done.stderr.strip()[-300:]}")
    finally:
        if made_policy:
            policy.unlink()


def system_mpirun() -> str:
    """The system's Open MPI mpirun (installing Debian's openmpi-bin where missing); the venv's bin
    is left out of the search so an MPI wheel there is never picked up."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.abspath(p) != venv_bin)
    found = shutil.which("ompi_info", path=path)
    if not found and can_install():
        apt_install(OPENMPI_PACKAGES)
        found = shutil.which("ompi_info", path=path)
    if not found:
        raise FileNotFoundError("no system Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    return str(Path(found).with_name("mpirun"))


def openmpi_library(mpirun: str) -> str:
    """The libmpi.so of the Open MPI that MPIRUN belongs to (ompi_info --path libdir)."""
    out = subprocess.run([str(Path(mpirun).with_name("ompi_info")), "--path", "libdir"], capture_output=True,
                         text=True, timeout=60).stdout
    libdir = out.split(":", 1)[1].strip() if ":" in out else ""
    library = Path(libdir) / "libmpi.so"
    if not library.exists():
        raise FileNotFoundError(f"ompi_info names no libmpi.so (got {out.strip()!r})")
    return str(library)


FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"


def fashion_mnist_dir() -> Path:
    """The folder of Debian's Fashion-MNIST files (installing the package where missing, as root);
    FileNotFoundError naming the package elsewhere."""
    from results.runners.fashion_mnist import FILES, SOURCE_DIR

    def present() -> bool:
        return all((SOURCE_DIR / name).is_file() for pair in FILES.values() for name in pair)

    if not present() and can_install():
        apt_install([FASHION_MNIST_PACKAGE])
    if not present():
        raise FileNotFoundError(f"no Fashion-MNIST in {SOURCE_DIR} (Debian: apt-get install {FASHION_MNIST_PACKAGE})")
    return SOURCE_DIR
