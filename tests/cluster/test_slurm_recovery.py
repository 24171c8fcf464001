"""Recovery without a user on the test cluster: faults injected into tiny real jobs (resnet18, 32 px,
gloo) that the generated batch files must survive on their own.

- a rank killed with SIGKILL: torchrun restarts its workers (``--max-restarts``), the srun files'
  loop restarts the step; both resume from the newest checkpoint in the same allocation;
- a node's processes killed: the step ends at once (``srun --kill-on-bad-exit``) and the loop
  starts it again;
- a training that crashes at every start (the committed torchrun file: torchrun's restarts and the
  batch loop's share one start budget) starts 1 + ``MAX_RESTARTS`` = 4 times, then ends with one line;
- a run that wrote a newer checkpoint before it failed keeps its budget: the kills above recover even
  with ``MAX_RESTARTS=0`` (no restart without progress);
- a node failure (slurmd and every process of the node killed, the node DOWN): SLURM requeues the
  job, which runs on other nodes, names the failed one and resumes from the newest checkpoint;
- a rank stopped with SIGSTOP (alive, silent): the collective times out within
  ``--collective-timeout``, one line names the rank, the step restarts without it.

The jobs checkpoint every INTERVAL steps (--checkpoint-every-steps) and each fault comes after a
periodic checkpoint in epoch 1: at most one interval of work may be lost.

Each test measures what RESULTS.md's fault table shows: recovered without a user (yes/no), the
time from the fault to training again (the first progress line after the resume), and the steps
and seconds of work lost (steps trained twice, at the step times the first run printed). With
HPC_IMAGENET_FAULT_RECORDS set (``python -m results.bench faults``) each appends one record.

The scenarios run at once, in waves on the session's cluster (tests/cluster/scenarios.py): most of a
fault's time is waiting (the requeue hold, a collective timeout, a restart) while the others train.
Each scenario's jobs are kept off the nodes another scenario's fault reaches (``WAVES``).
"""
from __future__ import annotations

import os
import re
import signal
import time
from functools import partial
from pathlib import Path
from typing import Callable, Optional, Sequence

import pytest

from tests.helpers import read_run
from tests.cluster.faults import (AT_ONCE, INTERVAL, PERIODIC, RESUMED, checkpoint_at, completed_in_one_allocation,
                                  job_pids, record_fault, seconds_lost, steps_trained_twice, training_again,
                                  wait_for_periodic_checkpoint)
from tests.cluster.requeue import EPOCHS, TRAIN, requeue_script, stand_in_trainer, submit_script
from tests.cluster.scenarios import Scenarios, Wave
from tests.helpers import REPO
from tests.slurm_cluster import SlurmCluster, wait_for

pytestmark = pytest.mark.slurm
COLLECTIVE_TIMEOUT_S = 20  # the stopped-rank test's --collective-timeout


def _kill_after_checkpoint(cluster: SlurmCluster, job_id: str, log: Callable[[], str], run_dir: Path,
                           node_id: int, rank: Optional[int], expected: int) -> tuple:
    """Once a periodic checkpoint of epoch 1 is kept, SIGKILL the job's python processes on NODE_ID
    (RANK: only that one); (log offset, time, processes killed)."""
    wait_for_periodic_checkpoint(run_dir)
    pids = wait_for("the processes to kill", lambda: (lambda p: p if len(p) >= expected else None)(
        job_pids(cluster, job_id, node_id, rank)), 30)
    since = len(log())
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return since, time.monotonic(), len(pids)


def _measure(fault: str, launcher: str, nodes: int, log: str, since: int, recover_s: float, **extra) -> None:
    """Record the fault; at most one checkpoint interval was trained twice, resumed mid-epoch 1."""
    twice = steps_trained_twice(log)
    record_fault(fault, launcher, nodes, True, extra.pop("detect_s", None), twice, 0, recovered=True,
                 recover_s=recover_s, seconds_lost=seconds_lost(log, since), **extra)
    epoch, step = map(int, RESUMED.search(log[since:]).groups())
    assert epoch == 1 and step >= INTERVAL, f"resumed at epoch {epoch} step {step}: not the periodic checkpoint"
    assert twice <= INTERVAL, f"{twice} steps trained twice; at most one interval ({INTERVAL}) may be lost"


def _torchrun_restart(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """The committed slurm/ddp_1node.sh (4 workers under torchrun, CPU here) with tiny-run settings:
    one worker killed; the agent restarts the workers, which resume; the job completes, never requeued."""
    run_dir = tmp_path / "run"
    extra = " ".join([*TRAIN, PERIODIC])
    settings = ["ALL", f"LOG_DIR={run_dir}", "OMP_NUM_THREADS=1", f"DATA={data}", "ARCH=resnet18",
                f"EPOCHS={EPOCHS}", "BATCH_SIZE=8", "WORKERS=0", f"EXTRA_ARGS={extra}"]
    out = tmp_path / "ddp_1node-%j.out"
    job_id = slurm_cluster.run(["sbatch", "--parsable", "--time=15", f"--output={out}", *pin, "--export",
                                ",".join(settings), str(REPO / "slurm" / "ddp_1node.sh")], cwd=REPO).stdout.strip()
    path = Path(str(out).replace("%j", job_id))
    log = lambda: path.read_text() if path.exists() else ""  # noqa: E731
    wait_for_periodic_checkpoint(run_dir)
    since, t0 = _kill_one_worker(slurm_cluster, job_id, log)
    recover = training_again(log, since, t0)
    completed_in_one_allocation(slurm_cluster, job_id, log, run_dir)
    assert "restarting it in this allocation" not in log(), "torchrun restarted the workers, not the loop"
    assert re.search(r"torchrun restarts the workers \(its restart 1 of 3 in this launch\): the last start wrote a "
                     r"newer checkpoint, so MAX_RESTARTS=3 is whole again; start 2 of MAX_STARTS=10", log()), log()
    _measure("kill -9 of one rank (torchrun restarts the workers)", "torchrun", 1, log(), since, recover)


def _kill_one_worker(cluster: SlurmCluster, job_id: str, log: Callable[[], str]) -> tuple:
    """SIGKILL one torchrun worker (not the agent) of JOB; (log offset, time)."""

    def worker() -> Optional[int]:
        for pid in job_pids(cluster, job_id, 0):
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if b"LOCAL_RANK=1" in env:
                return pid
        return None

    pid = wait_for("a torchrun worker", worker, 30)
    since = len(log())
    os.kill(pid, signal.SIGKILL)
    return since, time.monotonic()


KILLS = {  # fault: (launcher, processes per node, rank to kill on the second node or None: all of them)
    "kill -9 of one rank (the batch loop restarts the step)": ("srun", 1, 1),
    "kill -9 of a node's processes (torchrun agent + workers)": ("torchrun", 2, None),
}


def _batch_loop_restart(fault: str, slurm_cluster: SlurmCluster, data: Path, tmp_path: Path,
                        pin: Sequence[str]) -> None:
    """2 nodes. srun: one rank killed, its peer ends with the lost-peer line, the loop starts the step
    again. torchrun: the second node's agent and workers killed; --kill-on-bad-exit ends the step
    (the other agent would wait for its peer's rendezvous), the loop starts it again."""
    launcher, procs, rank = KILLS[fault]
    script_path = requeue_script(tmp_path, data, launcher, nodes=2, procs=procs)
    run_dir = tmp_path / "run"
    # MAX_RESTARTS=0: no restart without a newer checkpoint; the fault comes after one, so it recovers
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, f"EXTRA_ARGS={PERIODIC}", "MAX_RESTARTS=0",
                                sbatch_args=pin)
    expected = 1 if rank is not None else 1 + procs  # torchrun: the agent and its workers
    since, t0, killed = _kill_after_checkpoint(slurm_cluster, job_id, log, run_dir, 1, rank, expected)
    recover = training_again(log, since, t0)
    completed_in_one_allocation(slurm_cluster, job_id, log, run_dir)
    assert ("restarting it in this allocation from the newest checkpoint: the last start wrote a newer checkpoint, "
            "so MAX_RESTARTS=0 is whole again; start 2 of MAX_STARTS=10" in log()), log()[-3000:]
    _measure(fault, launcher, 2, log(), since, recover, killed=killed)


# Stands in for PYTHON: the torchrun agent (python -m launch.agent ...) is the real one; every worker
# (python -u SCRIPT ...) crashes at once, at every start, after writing which start it is in (its
# agent's pid and torchrun's restart count: the first worker to crash always gets that far; the others
# may be killed before they do).
CRASHING_WORKERS = """#!/bin/sh
[ "$1" = -m ] && exec python "$@"
echo "$PPID:$TORCHELASTIC_RESTART_COUNT" >> "$(dirname "$0")/worker_starts"
echo "crashing trainer started (rank $RANK)" >&2
exit 1
"""


def _repeating_failure(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """The committed slurm/ddp_1node.sh (torchrun, 4 workers) whose workers crash at every start:
    torchrun's restarts and the loop's share the budget, so it starts 1 + MAX_RESTARTS = 4 times (it
    was 1 + 3 torchrun restarts inside each of 1 + 3 loop attempts: 16), then gives up with one line."""
    trainer = stand_in_trainer(tmp_path, CRASHING_WORKERS)
    run_dir = tmp_path / "run"
    out = tmp_path / "ddp_1node-%j.out"
    settings = ["ALL", f"LOG_DIR={run_dir}", f"PYTHON={trainer}", f"DATA={data}", "OMP_NUM_THREADS=1"]
    job_id = slurm_cluster.run(["sbatch", "--parsable", "--time=10", f"--output={out}", *pin, "--export",
                                ",".join(settings), str(REPO / "slurm" / "ddp_1node.sh")], cwd=REPO).stdout.strip()
    row = slurm_cluster.wait_finished(job_id, timeout=360)  # one launch: 4 starts of 4 workers, loaded
    log = Path(str(out).replace("%j", job_id)).read_text()
    assert row["State"] == "FAILED", f"{row}\n{log[-3000:]}"
    starts = set((tmp_path / "worker_starts").read_text().split())
    assert len(starts) == 4, f"{sorted(starts)}\n{log[-4000:]}"  # (agent, restart): the starts that really ran
    torchrun = re.findall(r"torchrun restarts the workers \(its restart (\d) of 3 in this launch\): restart (\d) of "
                          r"MAX_RESTARTS=3 without a newer checkpoint", log)
    assert torchrun == [("1", "1"), ("2", "2"), ("3", "3")], log[-4000:]
    assert "restarting it in this allocation" not in log, "the loop must not start it again"
    giving_up = re.findall(r"^.*giving up.*$", log, re.M)
    assert len(giving_up) == 1 and "after 4 start(s) in a row without a newer checkpoint (MAX_RESTARTS=3)" in \
        giving_up[0], log[-3000:]
    assert len({line.split()[0] for line in (run_dir / "starts.log").read_text().splitlines()}) == 4


def _node_failure(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """2 nodes of 4; the second dies (slurmd and every process on it killed, marked DOWN) in epoch 1:
    SLURM requeues the job, which runs on two healthy nodes, names the DOWN one in its log and
    resumes from the newest checkpoint (a periodic one in epoch 1)."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=2, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir, f"EXTRA_ARGS={PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    first_nodes = slurm_cluster.run(["scontrol", "show", "hostnames",
                                     slurm_cluster.job_state(job_id)["NodeList"]]).stdout.split()
    victim = first_nodes[1]
    since = len(log())
    t0 = time.monotonic()
    killed = slurm_cluster.fail_node(victim)
    try:  # no release by hand: SLURM starts the requeued job itself once its hold (BeginTime) is over
        recover = training_again(log, since, t0)
        row = slurm_cluster.wait_finished(job_id, timeout=600, runs=2)
    finally:
        slurm_cluster.revive_node(victim)
    assert row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}"
    rows = [r for r in slurm_cluster.sacct(job_id) if r["JobID"] == job_id]
    assert victim not in slurm_cluster.run(["scontrol", "show", "hostnames", rows[-1]["NodeList"]]).stdout.split()
    assert re.search(rf"requeued run: nodes down or drained now \(not used\): .*{victim} \(node failure", log())
    assert checkpoint_at(run_dir) == (EPOCHS, 0)
    record = read_run(run_dir)
    assert record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS))
    _measure("node failure (node DOWN, requeued)", "srun", 2, log(), since, recover, killed=killed)
    # the node is back (the whole cluster idle is checked after each wave)
    slurm_cluster.wait_node_idle(victim)


def _stopped_rank(slurm_cluster: SlurmCluster, data: Path, tmp_path: Path, pin: Sequence[str]) -> None:
    """Rank 1 gets SIGSTOP (alive, holding its sockets open: no peer sees a closed connection). The
    collective times out after --collective-timeout, rank 0 prints one line naming rank 1 and its
    node, the step ends (the stopped task is killed) and the loop resumes without it."""
    script_path = requeue_script(tmp_path, data, "srun", nodes=2, procs=1)
    run_dir = tmp_path / "run"
    job_id, log = submit_script(slurm_cluster, script_path, run_dir,
                                f"EXTRA_ARGS=--collective-timeout={COLLECTIVE_TIMEOUT_S} {PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    pid = wait_for("rank 1", lambda: (job_pids(slurm_cluster, job_id, 1, 1) or [None])[0], 30)
    node = slurm_cluster.run(["scontrol", "show", "hostnames",
                              slurm_cluster.job_state(job_id)["NodeList"]]).stdout.split()[1]
    since = len(log())
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    error = wait_for("the line naming the stopped rank", lambda: re.search(r"^error: .*$", log()[since:], re.M),
                     COLLECTIVE_TIMEOUT_S + 90, interval=0.1)
    detect = time.monotonic() - t0
    grace = max(5.0, COLLECTIVE_TIMEOUT_S / 4)
    assert detect < COLLECTIVE_TIMEOUT_S + grace + 15, f"{detect:.0f}s; the bound is {COLLECTIVE_TIMEOUT_S}s + {grace}s"
    assert f"rank(s) 1 ({node}) did not arrive" in error.group(0), error.group(0)
    # one line names it (the stopped rank may add its own once the step's end resumes it to kill it)
    assert len(re.findall(r"did not arrive", log()[since:])) == 1 and "Traceback" not in log(), log()[-3000:]
    recover = training_again(log, since, t0)
    completed_in_one_allocation(slurm_cluster, job_id, log, run_dir)
    _measure("stopped rank (SIGSTOP)", "srun", 2, log(), since, recover, detect_s=round(detect, 2),
             error=error.group(0)[:300])


BATCH_LOOP_TEST = "test_the_batch_loop_restarts_a_failed_step_in_the_same_allocation"
# test name -> (scenario, where its jobs go). The faults: the kills and the stop reach only their own
# job's processes; the node failure kills every process of its victim node and takes it DOWN.
# Wave 1: the node failure may use node2-node4 (--exclude, not --nodelist: its requeued run must be free
# to leave the DOWN node); its victim is the second node of its first run, so node3 or node4, which no
# other job uses, and it requeues onto the two others. The kills and the stop share node1 + node2.
# Wave 2: the torchrun jobs (slurm/ddp_1node.sh asks for all 32 CPUs of a node) would hold back any job
# sharing their node, and wave 1 has no node left for them: one node each.
WAVES: Sequence[Wave] = (
    {"test_a_node_failure_requeues_the_job_elsewhere_and_resumes_exactly": (_node_failure, ("--exclude=node1",)),
     **{f"{BATCH_LOOP_TEST}[{fault}]": (partial(_batch_loop_restart, fault), "node1,node2") for fault in KILLS},
     "test_a_stopped_rank_ends_the_step_within_the_collective_timeout_naming_it": (_stopped_rank, "node1,node2")},
    {"test_torchrun_restarts_a_killed_rank_in_the_same_allocation": (_torchrun_restart, "node1"),
     "test_a_failure_repeating_past_the_bound_ends_the_job_with_one_line": (_repeating_failure, "node2")},
)


@pytest.fixture(scope="module")
def scenarios(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path) -> Scenarios:
    return Scenarios(request, slurm_cluster, data, WAVES, at_once=AT_ONCE)


def test_torchrun_restarts_a_killed_rank_in_the_same_allocation(scenarios: Scenarios,
                                                                request: pytest.FixtureRequest) -> None:
    """One torchrun worker killed: the agent restarts the workers, they resume (see _torchrun_restart)."""
    scenarios.outcome(request.node.name)


@pytest.mark.parametrize("fault", list(KILLS))
def test_the_batch_loop_restarts_a_failed_step_in_the_same_allocation(scenarios: Scenarios,
                                                                      request: pytest.FixtureRequest,
                                                                      fault: str) -> None:
    """A rank or a node's processes killed: the loop starts the step again (see _batch_loop_restart)."""
    scenarios.outcome(request.node.name)


def test_a_failure_repeating_past_the_bound_ends_the_job_with_one_line(scenarios: Scenarios,
                                                                       request: pytest.FixtureRequest) -> None:
    """Workers that crash at every start: 4 starts in all, then one line (see _repeating_failure)."""
    scenarios.outcome(request.node.name)


def test_a_node_failure_requeues_the_job_elsewhere_and_resumes_exactly(scenarios: Scenarios,
                                                                        request: pytest.FixtureRequest) -> None:
    """A node DOWN: SLURM requeues the job elsewhere, it resumes exactly (see _node_failure)."""
    scenarios.outcome(request.node.name)


def test_a_stopped_rank_ends_the_step_within_the_collective_timeout_naming_it(
        scenarios: Scenarios, request: pytest.FixtureRequest) -> None:
    """A stopped rank is named within --collective-timeout and the step restarts (see _stopped_rank)."""
    scenarios.outcome(request.node.name)
