"""Fixtures of the engine tier: a run folder that several tests only read. A tiny training run is a
process start and seconds of CPU on 2 cores, so tests that assert on what a plain run wrote (its
run.json, its checkpoint, no profile) share one instead of training their own."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import DUMMY_STEP_TIMES, explain, script
from tests.warm_start import warm_python


@pytest.fixture(scope="session")
def dummy_run(tmp_path_factory) -> Path:
    """imagenet_nd.py with DUMMY_STEP_TIMES on the CPU (no --profile-steps); its run folder."""
    run_dir = tmp_path_factory.mktemp("dummy_run")
    proc = warm_python(script("imagenet_nd.py"), *DUMMY_STEP_TIMES, "--log-dir", run_dir)
    assert proc.returncode == 0, explain(proc)
    return run_dir


@pytest.fixture(scope="session")
def fashion_cache(tmp_path_factory) -> Path:
    """A cache folder for slices of the real Fashion-MNIST (Debian's package, installed where missing);
    each slice is converted once per session (studies.fashion_mnist_race.fashion_mnist reuses a finished one)."""
    from tests.helpers import fashion_mnist_dir

    fashion_mnist_dir()
    return tmp_path_factory.mktemp("fashion_cache")
