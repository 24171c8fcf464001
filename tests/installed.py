"""An install of the project outside any checkout, as a user gets it: a wheel built from this checkout, installed
with pip into a virtual environment of its own (its console scripts in its bin/), beside no checkout.

What differs from a user's fresh venv: the dependencies (torch, torchvision, ...) are not downloaded again; a .pth
line puts the test environment's site-packages after the new one's, so they are found there. That folder's own
.pth files (the checkout's editable install among them) are not read, so `hpc_imagenet` comes from the wheel alone.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.helpers import REPO


def build(root: Path) -> Path:
    """The venv's python, with the project's wheel installed in ROOT/venv."""
    wheels, venv, src = root / "wheels", root / "venv", root / "src"
    # from a copy of what the build reads: the build writes build/ and *.egg-info beside its sources, and two test
    # workers building in the checkout at once would share them
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "hpc_imagenet", src / "hpc_imagenet", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "--disable-pip-version-check", "-w", str(wheels), str(src)], cwd=root)
    (wheel,) = wheels.glob("hpc_imagenet-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root).strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
          "--disable-pip-version-check", str(wheel)], cwd=root)
    return python


def _run(argv, cwd: Path) -> str:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{argv}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc.stdout
