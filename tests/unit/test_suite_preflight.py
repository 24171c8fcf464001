"""The suite's own preflight (tests/conftest.py): pytest stops before the first test, in one line that
names the disk and the fix, where the temporary folders' disk has less room than the suite needs.
Run as a real pytest in a child process, on a real disk, with the needed room set above or below
what that disk has free."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.helpers import REPO

TINY_MODULE = "tests/unit/test_names.py"  # any fast module: only collection runs


def collect(tmp_path, needed_gb) -> subprocess.CompletedProcess:
    env = {**os.environ, "HPC_IMAGENET_TEST_FREE_GB": str(needed_gb)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "--basetemp", str(tmp_path / "base"), TINY_MODULE],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env)


def test_too_little_room_stops_before_any_test(tmp_path):
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    out = collect(tmp_path, needed_gb=free_gb * 10 + 1)
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's usage error, not a test failure
    said = out.stdout + out.stderr
    assert f"GB free on the disk of {tmp_path / 'base'}" in said
    assert "point TMPDIR (or --basetemp) at a disk with room" in said
    assert "collected" not in said  # stopped before collecting anything


def test_enough_room_goes_on(tmp_path):
    out = collect(tmp_path, needed_gb=0.001)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "GB free" not in out.stdout + out.stderr


def test_a_floor_that_is_not_a_number_is_named(tmp_path):
    out = collect(tmp_path, needed_gb="3GB")
    assert out.returncode == 4, out.stdout + out.stderr
    assert "HPC_IMAGENET_TEST_FREE_GB='3GB' is not a number of GB" in out.stdout + out.stderr
