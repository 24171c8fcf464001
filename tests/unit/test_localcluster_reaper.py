"""The local cluster's reaper of stale clusters kills a recorded daemon only while its PID still names that
daemon (PID and start time): on a busy machine PIDs are reused within minutes, and a stale state file must
not take some later process with it. Real processes, a real state folder; the network teardown is given
names that no real cluster has (its ids are hex), which it tolerates."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpc_imagenet.slurm.localcluster import cluster, daemons


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _record(state_dir, cid, owner, owner_ticks, pid, ticks, base):
    state = {"owner": owner, "owner_ticks": owner_ticks, "cid": cid, "nodes": 1, "subnet": "10.254.254",
             "base": str(base), "pids": {"slurmctld": pid}, "ticks": {"slurmctld": ticks}}
    (state_dir / f"{cid}.json").write_text(json.dumps(state))


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_start_ticks_name_one_process(sleeper):
    ticks = daemons.start_ticks(sleeper.pid)
    assert ticks is not None and daemons.same_process(sleeper.pid, ticks)
    assert not daemons.same_process(sleeper.pid, ticks + 1)
    assert not daemons.same_process(sleeper.pid, None)
    assert daemons.start_ticks(_dead_pid()) is None


def test_a_reused_pid_is_left_alone_and_the_recorded_daemon_is_killed(tmp_path, monkeypatch, sleeper):
    monkeypatch.setattr(cluster, "STATE_DIR", tmp_path)
    ticks = daemons.start_ticks(sleeper.pid)
    # a stale cluster whose recorded daemon PID now names another process (another start time)
    _record(tmp_path, "zz01", _dead_pid(), 1, sleeper.pid, ticks - 1, tmp_path / "base-a")
    cluster.reap_stale()
    assert sleeper.poll() is None, "a process that reused a recorded PID was killed"
    assert not (tmp_path / "zz01.json").exists()
    # a stale cluster whose daemon is still the recorded process
    _record(tmp_path, "zz02", _dead_pid(), 1, sleeper.pid, ticks, tmp_path / "base-b")
    cluster.reap_stale()
    assert sleeper.wait(timeout=10) == -9


def test_a_live_owner_keeps_its_cluster(tmp_path, monkeypatch, sleeper):
    monkeypatch.setattr(cluster, "STATE_DIR", tmp_path)
    ticks = daemons.start_ticks(sleeper.pid)
    _record(tmp_path, "zz03", sleeper.pid, ticks, sleeper.pid, ticks, tmp_path / "base-c")
    cluster.reap_stale()
    assert sleeper.poll() is None and (tmp_path / "zz03.json").exists()
