"""The Debian packages the local cluster (and the Open MPI tests) take from the distribution,
installed with apt-get where they are missing (as root).

System software (SLURM, munge, MariaDB, Open MPI) comes from the distribution, never from a wheel in
the project's venv: an MPI wheel there would shadow a site MPI in a user's venv the same way.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

from slurm.localcluster.commands import ClusterError, ClusterUnavailable, which

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


def missing_packages(accounting: bool = True) -> List[str]:
    """The SLURM packages (with ACCOUNTING: slurmdbd and MariaDB too) whose programs are not here."""
    wanted = {**BINARIES, **(ACCOUNTING_BINARIES if accounting else {})}
    missing = {package for binary, package in wanted.items() if not which(binary)}
    return sorted(missing | (set() if glob.glob(PMIX_LIBRARY) else {"libpmix-dev"}))


def ensure_packages(accounting: bool = True) -> None:
    """apt-get install the SLURM packages that are missing (idempotent, no daemon auto-start)."""
    if not missing_packages(accounting):
        return
    try:
        apt_install([*PACKAGES, *(ACCOUNTING_PACKAGES if accounting else ())])
    except RuntimeError as exc:
        raise ClusterError(str(exc)) from None
    if missing_packages(accounting):
        raise ClusterUnavailable(f"packages still missing after apt-get: {missing_packages(accounting)}")


def system_mpirun() -> str:
    """The system's Open MPI mpirun (installing Debian's openmpi-bin where missing); the venv's bin
    is left out of the search so an MPI wheel there is never picked up."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = os.pathsep.join(folder for folder in os.environ.get("PATH", "").split(os.pathsep)
                           if folder and os.path.abspath(folder) != venv_bin)
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
