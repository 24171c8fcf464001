"""Fixtures of the launch tier: the demo dataset every launcher test trains on."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON, REPO


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """4 classes, 8 train / 4 val JPEGs each, made by the user-facing command (python -m
    hpc_imagenet.imagenet.data.demo)."""
    root = tmp_path_factory.mktemp("launch-data") / "demo"
    subprocess.run([PYTHON, "-m", "hpc_imagenet.imagenet.data.demo", str(root), "--classes", "4", "--train-per-class",
                    "8",
                    "--val-per-class", "4"], cwd=REPO, check=True, capture_output=True, timeout=120)
    return root
