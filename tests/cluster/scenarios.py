"""Cluster scenarios run at once on the session's SLURM test cluster, for the modules whose tests
spend most of their time waiting (a dist-timeout, a requeue hold, a job's end, a slurmd coming back)
rather than training: each test's scenario (submit, inject, wait, assert) runs in a thread, all of a
wave together, and the test then re-raises its own scenario's outcome. The assertions are the
scenarios' own, exactly as when the tests ran one after the other.

A wave maps a test's name (``request.node.name``) to its scenario and the nodes its jobs are pinned to
(``None``: anywhere), so that a fault one scenario injects into a node never reaches another's job. A
pin is a node list (``"node1,node2"``: ``--nodelist``) or, for a job that must be free to move
(a requeue after a node failure cannot wait for a listed node), the sbatch options themselves
(``("--exclude=node1",)``).
A wave starts when its first test asks for an outcome (pytest's per-test timeout then covers one
wave) and ends with every node idle, so the next wave or module starts on a clean cluster.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import pytest

from tests.slurm_cluster import SlurmCluster

# (cluster, data, tmp_path, extra sbatch options) -> None; raises what the test would have raised
Scenario = Callable[[SlurmCluster, Path, Path, Sequence[str]], None]
Pin = Union[None, str, Tuple[str, ...]]  # anywhere, a --nodelist, or sbatch options
Wave = Dict[str, Tuple[Scenario, Pin]]


class Scenarios:
    """The outcomes of one module's scenarios, run wave by wave (at most ``at_once`` together)."""

    def __init__(self, request: pytest.FixtureRequest, cluster: SlurmCluster, data: Path,
                 waves: Sequence[Wave], at_once: Optional[int] = None) -> None:
        module = request.module
        self.selected = {item.name for item in request.session.items if getattr(item, "module", None) is module}
        self.cluster, self.data, self.waves, self.at_once = cluster, data, waves, at_once
        self.tmp = request.getfixturevalue("tmp_path_factory")
        self.futures: Dict[str, Future] = {}

    def outcome(self, name: str) -> None:
        """Re-raise what went wrong in NAME's scenario; run its wave first if it has not run."""
        if name not in self.futures:
            self._run(next(wave for wave in self.waves if name in wave))
        self.futures[name].result()

    def _run(self, wave: Wave) -> None:
        chosen = {name: how for name, how in wave.items() if name in self.selected}
        with ThreadPoolExecutor(self.at_once or len(chosen)) as pool:  # leaving the block waits for all
            for name, (scenario, nodes) in chosen.items():
                pin = [f"--nodelist={nodes}"] if isinstance(nodes, str) else list(nodes or ())
                self.futures[name] = pool.submit(scenario, self.cluster, self.data,
                                                 self.tmp.mktemp(name.split("[")[0][:40]), pin)
        wait(self.futures.values())
        if any(self.futures[name].exception() for name in chosen):  # a failed scenario may leave its job
            self.cluster.run(["scancel", "--user=root"], check=False)
        self.cluster.wait_idle(timeout=300)
