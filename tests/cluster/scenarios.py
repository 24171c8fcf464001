"""The cluster scenarios (hpc_imagenet/slurm/localcluster/scenarios/) as pytest tests: each test's scenario
(submit, inject, wait, check) runs in a thread, all of its wave at once on the session's cluster,
and the test then re-raises its own scenario's outcome. The checks are the scenarios' own, exactly
as when the tests ran one after the other.

A module's waves map a test's name (``request.node.name``) to its scenario and pin (see
hpc_imagenet/slurm/localcluster/scenarios/waves.py). A wave starts when its first test asks for an outcome
(pytest's per-test timeout then covers one wave) and ends with every node idle, so the next wave
or module starts on a clean cluster.
"""
from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Set

import pytest

from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.waves import Wave, run_wave


def selected_names(request: pytest.FixtureRequest) -> Set[str]:
    """The names of the tests of REQUEST's module that this session runs (after -m and -k): a module fixture
    starts jobs for these alone."""
    module = request.module
    return {item.name for item in request.session.items if getattr(item, "module", None) is module}


def selected_ids(request: pytest.FixtureRequest, test: str) -> Set[str]:
    """The parameter ids of TEST, a parametrized test of REQUEST's module, that this session runs: a module fixture
    starts the jobs of these alone."""
    module = request.module
    return {item.callspec.id for item in request.session.items
            if getattr(item, "module", None) is module and item.originalname == test}


def by_test_name(waves: Sequence[Wave], tests: Mapping[str, str]) -> List[Wave]:
    """WAVES with each scenario's name replaced by the name of the test (TESTS: test -> scenario)
    that asserts on it; scenarios no test names are left out."""
    renamed = [{test: wave[scenario] for test, scenario in tests.items() if scenario in wave} for wave in waves]
    return [wave for wave in renamed if wave]


class Scenarios:
    """The outcomes of one module's scenarios, run wave by wave (at most ``at_once`` together)."""

    def __init__(self, request: pytest.FixtureRequest, cluster: SlurmCluster, data: Path,
                 waves: Sequence[Wave], at_once: Optional[int] = None) -> None:
        self.selected = selected_names(request)
        self.cluster, self.data, self.waves, self.at_once = cluster, data, waves, at_once
        self.tmp = request.getfixturevalue("tmp_path_factory")
        self.futures: Dict[str, Future] = {}

    def outcome(self, name: str) -> None:
        """Re-raise what went wrong in NAME's scenario; run its wave first if it has not run."""
        if name not in self.futures:
            wave = next(wave for wave in self.waves if name in wave)
            self.futures.update(run_wave(self.cluster, self.data, wave, self._folder, only=self.selected,
                                         at_once=self.at_once))
        self.futures[name].result()

    def _folder(self, name: str) -> Path:
        return self.tmp.mktemp(name.split("[")[0][:40])
