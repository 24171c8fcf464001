"""Recovery without a user on the local cluster: faults injected into tiny real jobs (a small
ShuffleNet, 32 px, gloo) that the generated batch files must survive on their own.

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
periodic checkpoint in epoch 1: at most one interval of work may be lost. Each scenario returns
its :class:`~hpc_imagenet.slurm.localcluster.scenarios.measure.Measurement` (the repeating failure, which
measures nothing, returns None).
"""
from __future__ import annotations

import os
import re
import signal
import time
from functools import partial
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from hpc_imagenet.slurm import client
from hpc_imagenet.slurm.localcluster.cluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.commands import wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import (ARCH, EPOCHS, REPO, TRAIN, VENV, requeue_script,
                                                            stand_in_trainer, submit_script)
from hpc_imagenet.slurm.localcluster.scenarios.measure import (INTERVAL, PERIODIC, RESUMED, Measurement, check,
                                                               checkpoint_at, completed_in_one_allocation, job_pids,
                                                               read_run, seconds_lost, steps_trained_twice,
                                                               training_again, wait_for_periodic_checkpoint)

COLLECTIVE_TIMEOUT_S = 20  # the stopped-rank scenario's --collective-timeout


def _kill_after_checkpoint(cluster: SlurmCluster, job_id: str, log: Callable[[], str], run_dir: Path,
                           node_id: int, rank: Optional[int], expected: int) -> tuple:
    """Once a periodic checkpoint of epoch 1 is kept, SIGKILL the job's python processes on NODE_ID
    (RANK: only that one); (log offset, time, processes killed)."""
    wait_for_periodic_checkpoint(run_dir)

    def enough() -> Optional[list]:
        pids = job_pids(cluster, job_id, node_id, rank)
        return pids if len(pids) >= expected else None

    pids = wait_for("the processes to kill", enough, 30)
    since = len(log())
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return since, time.monotonic(), len(pids)


def _measured(fault: str, launcher: str, nodes: int, log: str, since: int, recover_s: float,
              detect_s: Optional[float] = None, **extra) -> Measurement:
    """The fault's measurement, once checked: at most one checkpoint interval was trained twice,
    resumed mid-epoch 1."""
    twice = steps_trained_twice(log)
    epoch, step = map(int, RESUMED.search(log[since:]).groups())
    check(epoch == 1 and step >= INTERVAL, f"resumed at epoch {epoch} step {step}: not the periodic checkpoint")
    check(twice <= INTERVAL, f"{twice} steps trained twice; at most one interval ({INTERVAL}) may be lost")
    return Measurement(fault, launcher, nodes, True, twice, detect_s=detect_s, recovered=True, recover_s=recover_s,
                       seconds_lost=seconds_lost(log, since), extra=extra)


def torchrun_restart(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """The committed slurm/ddp_1node.sh (4 workers under torchrun, CPU here) with tiny-run settings:
    one worker SIGKILLed after a periodic checkpoint; torchrun's agent restarts the workers, which
    resume; the job completes, never requeued."""
    run_dir = folder / "run"
    extra = " ".join([*TRAIN, PERIODIC])
    settings = ["ALL", f"VENV={VENV}", f"LOG_DIR={run_dir}", "OMP_NUM_THREADS=1", f"DATA={data}", f"ARCH={ARCH}",
                f"EPOCHS={EPOCHS}", "BATCH_SIZE=8", "WORKERS=0", f"EXTRA_ARGS={extra}"]
    out = folder / "ddp_1node-%j.out"
    job_id = client.submit(REPO / "slurm" / "ddp_1node.sh", ["--time=15", f"--output={out}", *pin, "--export",
                                                             ",".join(settings)], cwd=REPO, env=cluster.env)
    path = Path(str(out).replace("%j", job_id))

    def log() -> str:
        return path.read_text() if path.exists() else ""

    wait_for_periodic_checkpoint(run_dir)
    since, started = _kill_one_worker(cluster, job_id, log)
    recover = training_again(log, since, started)
    completed_in_one_allocation(cluster, job_id, log, run_dir)
    check("restarting it in this allocation" not in log(), "torchrun restarted the workers, not the loop")
    check(re.search(r"torchrun restarts the workers \(its restart 1 of 3 in this launch\): the last start wrote a "
                    r"newer checkpoint, so MAX_RESTARTS=3 is whole again; start 2 of MAX_STARTS=10", log()) is not None,
          log()[-3000:])
    return _measured("kill -9 of one rank (torchrun restarts the workers)", "torchrun", 1, log(), since, recover)


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


# fault: (launcher, processes per node, rank to kill on the second node or None: all of them)
KILLS: Dict[str, Tuple[str, int, Optional[int]]] = {
    "kill -9 of one rank (the batch loop restarts the step)": ("srun", 1, 1),
    "kill -9 of a node's processes (torchrun agent + workers)": ("torchrun", 2, None),
}


def batch_loop_restart(fault: str, cluster: SlurmCluster, data: Path, folder: Path,
                       pin: Sequence[str]) -> Measurement:
    """2 nodes. srun: one rank killed, its peer ends with the lost-peer line, the loop starts the step
    again. torchrun: the second node's agent and workers killed; --kill-on-bad-exit ends the step
    (the other agent would wait for its peer's rendezvous), the loop starts it again."""
    launcher, procs, rank = KILLS[fault]
    script_path = requeue_script(folder, data, launcher, nodes=2, procs=procs)
    run_dir = folder / "run"
    # MAX_RESTARTS=0: no restart without a newer checkpoint; the fault comes after one, so it recovers
    job_id, log = submit_script(cluster, script_path, run_dir, f"EXTRA_ARGS={PERIODIC}", "MAX_RESTARTS=0",
                                sbatch_args=pin)
    expected = 1 if rank is not None else 1 + procs  # torchrun: the agent and its workers
    since, started, killed = _kill_after_checkpoint(cluster, job_id, log, run_dir, 1, rank, expected)
    recover = training_again(log, since, started)
    completed_in_one_allocation(cluster, job_id, log, run_dir)
    check("restarting it in this allocation from the newest checkpoint: the last start wrote a newer checkpoint, "
          "so MAX_RESTARTS=0 is whole again; start 2 of MAX_STARTS=10" in log(), log()[-3000:])
    return _measured(fault, launcher, 2, log(), since, recover, killed=killed)


rank_killed = partial(batch_loop_restart, "kill -9 of one rank (the batch loop restarts the step)")
node_processes_killed = partial(batch_loop_restart, "kill -9 of a node's processes (torchrun agent + workers)")

# Stands in for PYTHON: the torchrun agent (python -m hpc_imagenet.launch.agent ...) is the real one; every worker
# (python -u SCRIPT ...) crashes at once, at every start, after writing which start it is in (its
# agent's pid and torchrun's restart count: the first worker to crash always gets that far; the others
# may be killed before they do).
CRASHING_WORKERS = """#!/bin/sh
[ "$1" = -m ] && exec python "$@"
echo "$PPID:$TORCHELASTIC_RESTART_COUNT" >> "$(dirname "$0")/worker_starts"
echo "crashing trainer started (rank $RANK)" >&2
exit 1
"""


def repeating_failure(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> None:
    """The committed slurm/ddp_1node.sh (torchrun, 4 workers) whose workers crash at every start:
    torchrun's restarts and the loop's share the budget, so it starts 1 + MAX_RESTARTS = 4 times (it
    was 1 + 3 torchrun restarts inside each of 1 + 3 loop attempts: 16), then gives up with one line."""
    trainer = stand_in_trainer(folder, CRASHING_WORKERS)
    run_dir = folder / "run"
    out = folder / "ddp_1node-%j.out"
    settings = ["ALL", f"VENV={VENV}", f"LOG_DIR={run_dir}", f"PYTHON={trainer}", f"DATA={data}",
                "OMP_NUM_THREADS=1"]
    job_id = client.submit(REPO / "slurm" / "ddp_1node.sh", ["--time=10", f"--output={out}", *pin, "--export",
                                                             ",".join(settings)], cwd=REPO, env=cluster.env)
    row = cluster.wait_finished(job_id, timeout=360)  # one launch: 4 starts of 4 workers, on a loaded machine
    log = Path(str(out).replace("%j", job_id)).read_text()
    check(row["State"] == "FAILED", f"{row}\n{log[-3000:]}")
    starts = set((folder / "worker_starts").read_text().split())  # (agent, restart): the starts that really ran
    check(len(starts) == 4, f"{sorted(starts)}\n{log[-4000:]}")
    torchrun = re.findall(r"torchrun restarts the workers \(its restart (\d) of 3 in this launch\): restart (\d) of "
                          r"MAX_RESTARTS=3 without a newer checkpoint", log)
    check(torchrun == [("1", "1"), ("2", "2"), ("3", "3")], log[-4000:])
    check("restarting it in this allocation" not in log, "the loop must not start it again")
    giving_up = re.findall(r"^.*giving up.*$", log, re.M)
    check(len(giving_up) == 1 and "after 4 start(s) in a row without a newer checkpoint (MAX_RESTARTS=3)" in
          giving_up[0], log[-3000:])
    check(len({line.split()[0] for line in (run_dir / "starts.log").read_text().splitlines()}) == 4, log[-3000:])


def node_failure(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """2 nodes of 4; the second dies (slurmd and every process on it killed, marked DOWN) in epoch 1:
    SLURM requeues the job, which runs on two healthy nodes, names the DOWN one in its log and
    resumes from the newest checkpoint (a periodic one in epoch 1)."""
    script_path = requeue_script(folder, data, "srun", nodes=2, procs=1)
    run_dir = folder / "run"
    job_id, log = submit_script(cluster, script_path, run_dir, f"EXTRA_ARGS={PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    victim = cluster.job_nodes(job_id)[1]
    since = len(log())
    started = time.monotonic()
    killed = cluster.fail_node(victim)
    try:  # no release by hand: SLURM starts the requeued job itself once its hold (BeginTime) is over
        recover = training_again(log, since, started)
        row = cluster.wait_finished(job_id, timeout=600, runs=2)
    finally:
        cluster.revive_node(victim)
    check(row["State"] == "COMPLETED", f"{row}\n{log()[-3000:]}")
    rows = [row for row in cluster.sacct(job_id) if row["JobID"] == job_id]
    check(victim not in cluster.hostnames(rows[-1]["NodeList"]), f"the requeued run used {victim}: {rows[-1]}")
    check(re.search(rf"requeued run: nodes down or drained now \(not used\): .*{victim} \(node failure", log()),
          log()[-3000:])
    check(checkpoint_at(run_dir) == (EPOCHS, 0), f"final checkpoint at {checkpoint_at(run_dir)}")
    record = read_run(run_dir)
    check(record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == list(range(EPOCHS)), record)
    measurement = _measured("node failure (node DOWN, requeued)", "srun", 2, log(), since, recover, killed=killed)
    cluster.wait_node_idle(victim)  # the node is back (the whole cluster idle is checked after each wave)
    return measurement


def stopped_rank(cluster: SlurmCluster, data: Path, folder: Path, pin: Sequence[str]) -> Measurement:
    """Rank 1 gets SIGSTOP (alive, holding its sockets open: no peer sees a closed connection). The
    collective times out after --collective-timeout, rank 0 prints one line naming rank 1 and its
    node, the step ends (the stopped task is killed) and the loop resumes without it."""
    script_path = requeue_script(folder, data, "srun", nodes=2, procs=1)
    run_dir = folder / "run"
    job_id, log = submit_script(cluster, script_path, run_dir,
                                f"EXTRA_ARGS=--collective-timeout={COLLECTIVE_TIMEOUT_S} {PERIODIC}", sbatch_args=pin)
    wait_for_periodic_checkpoint(run_dir)
    pid = wait_for("rank 1", lambda: (job_pids(cluster, job_id, 1, 1) or [None])[0], 30)
    node = cluster.job_nodes(job_id)[1]
    since = len(log())
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    error = wait_for("the line naming the stopped rank", lambda: re.search(r"^error: .*$", log()[since:], re.M),
                     COLLECTIVE_TIMEOUT_S + 90, interval=0.1)
    detect = time.monotonic() - started
    grace = max(5.0, COLLECTIVE_TIMEOUT_S / 4)
    check(detect < COLLECTIVE_TIMEOUT_S + grace + 15, f"{detect:.0f}s; the bound is {COLLECTIVE_TIMEOUT_S}s + {grace}s")
    check(f"rank(s) 1 ({node}) did not arrive" in error.group(0), error.group(0))
    # one line names it (the stopped rank may add its own once the step's end resumes it to kill it)
    check(len(re.findall(r"did not arrive", log()[since:])) == 1 and "Traceback" not in log(), log()[-3000:])
    recover = training_again(log, since, started)
    completed_in_one_allocation(cluster, job_id, log, run_dir)
    return _measured("stopped rank (SIGSTOP)", "srun", 2, log(), since, recover, detect_s=round(detect, 2),
                     error=error.group(0)[:300])
