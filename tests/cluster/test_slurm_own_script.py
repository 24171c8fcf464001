"""Your own script on the generated batch files, on the test cluster: the plain DDP example
(launch/examples/train_ddp.py, which keeps the requeue contract) and the Lightning one with the callback
(launch/examples/train_lightning.py) are stopped by the time-limit signal in mid-run under torchrun (2 nodes x 2
processes; the Lightning one on 2 x 1, and on 4 x 2 in the long tier), requeued, and resumed so that every step is
trained once; the Lightning one with Lightning's own SLURM auto-requeue under srun (its scontrol the batch file's
stand-in), requeued from the host and restored by Lightning from its own checkpoint (one process: with several,
Lightning's handler deadlocks over gloo, see docs/slurm.md); the plain one when the signal comes while the script
is still importing; a script that ignores the contract is ended before the time limit under srun, not requeued, and
its batch log says why; and a script that fails at every start is started as often as the start budget allows,
then given up on in one line.

The jobs run at once: most of each is waiting on SLURM (the signal, the requeue hold, the next start)."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import pytest

from hpc_imagenet.imagenet.data.staging import MARKER, destination
from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.localcluster import SlurmCluster, wait_for
from hpc_imagenet.slurm.localcluster.commands import ClusterError
from hpc_imagenet.slurm.localcluster.scenarios.jobs import release_requeued, run_states
from tests.cluster.scenarios import selected_names
from tests.helpers import REPO

pytestmark = pytest.mark.slurm
EXAMPLE = REPO / "launch" / "examples" / "train_ddp.py"
IMAGES = REPO / "launch" / "examples" / "train_images.py"
STAGED_EPOCHS = 3  # of 12 steps (192 images, 2 ranks of batch 8)
STAGED_NODES = ("node3", "node4")
LIGHTNING = REPO / "launch" / "examples" / "train_lightning.py"
STEPS = 100  # about 10 s of training for 4 ranks of batch 32 here: the signal comes in mid-run
SLOW_IMPORT = """import os, pathlib, runpy, sys, time
# the job's first run is still importing (a slow filesystem, a large package) when the signal comes
if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    pathlib.Path(os.environ["HPC_IMAGENET_RUN_DIR"], "importing-" + os.environ["RANK"]).touch()
    while not pathlib.Path(os.environ["HPC_IMAGENET_RUN_DIR"], "stop.requested").exists():  # the job's limit bounds it
        time.sleep(0.2)
    time.sleep(2)  # the signal itself reaches the process a moment after the batch file's stop file
sys.argv[0] = {example!r}
runpy.run_path({example!r}, run_name="__main__")
"""
CRASHES = """raise SystemExit("a script broken at start (a missing module, a bad path)")
"""
IGNORES = """import time
print("a script that never asks whether to stop", flush=True)
while True:
    time.sleep(1)
"""


@dataclass
class Job:
    job_id: str
    run_dir: Path
    log: Callable[[], str]
    release_error: Optional[Exception] = None  # why its requeued run could not be released, if so


def _generate(tmp: Path, name: str, script: Path, launcher: str, nodes: int, procs: int, *script_args: str,
              framework: str = "plain", options: Sequence[str] = ()) -> Path:
    argv = ["--script", str(script), "--framework", framework, "--name", name, "--nodes", str(nodes),
            "--gpus-per-node", "0", "--procs-per-node", str(procs), "--cpus-per-task", "1", "--launcher", launcher,
            "--time", "10", "--signal-seconds", "60", "--venv", sys.prefix, "--output", str(tmp / "%x-%j.out"),
            *options, "--", *script_args]
    path = tmp / f"{name}.sh"
    path.write_text(render(spec_from_args(argv)))
    return path


def _submit(cluster: SlurmCluster, script: Path, run_dir: Path, *sbatch_args: str) -> Job:
    # the grace after the signal: the 30 s of --signal-seconds 60, but two minutes for the script still importing
    # when it comes (it then imports torch and forms its process group, slow on this loaded machine)
    grace = 120 if script.stem == "importing" else 30
    out = subprocess.run(["sbatch", "--parsable", "--export", f"ALL,LOG_DIR={run_dir},OMP_NUM_THREADS=1,"
                          f"HPC_IMAGENET_STOP_GRACE={grace}", *sbatch_args, str(script)], cwd=script.parent,
                         env=cluster.env, capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    log = script.parent / f"{script.stem}-{job_id}.out"
    return Job(job_id, run_dir, lambda: log.read_text() if log.exists() else "")


def _signal(cluster: SlurmCluster, job: Job) -> None:
    """What --signal=B:USR2@T does at the time limit."""
    cluster.run(["scancel", "--batch", "--signal=USR2", job.job_id])


# each job and the test that checks it: a job runs only where its test was selected (make test leaves some to
# make test-long, tests/conftest.py)
LIGHTNING_TEST = "test_a_lightning_script_with_the_callback_resumes_at_the_exact_step"
LIGHTNING_SHAPES = {"lightning": (2, 1), "lightning_wide": (4, 2)}  # job -> (nodes, processes per node)


def _shape_id(job: str) -> str:
    """The Lightning test's parameter id for JOB: its nodes x processes, "2x1"."""
    return "x".join(map(str, LIGHTNING_SHAPES[job]))


TEST_OF = {"plain": "test_a_plain_script_stopped_mid_run_resumes_at_the_exact_step",
           **{job: f"{LIGHTNING_TEST}[{_shape_id(job)}]" for job in LIGHTNING_SHAPES},
           "native": "test_lightnings_own_requeue_under_srun_is_requeued_from_the_host_and_restored",
           "importing": "test_a_signal_during_the_scripts_imports_is_not_lost",
           "ignores": "test_a_script_that_ignores_the_contract_ends_in_time_and_says_why",
           "crashes": "test_a_script_that_fails_at_every_start_spends_the_start_budget_then_stops",
           "staged": "test_a_script_reads_its_nodes_staged_copy_and_resumes_mid_epoch_at_the_exact_batch"}


@pytest.fixture(scope="module")
def jobs(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, tmp_path_factory, data: Path) -> Dict[str, Job]:
    selected = selected_names(request)
    wanted = {name for name, test in TEST_OF.items() if test in selected}
    tmp = tmp_path_factory.mktemp("own_script")
    slow = tmp / "slow_import.py"
    slow.write_text(SLOW_IMPORT.format(example=str(EXAMPLE)))
    ignores = tmp / "ignores.py"
    ignores.write_text(IGNORES)
    crashes = tmp / "crashes.py"
    crashes.write_text(CRASHES)
    started = {}
    for name, script, launcher, nodes, procs, framework in (("plain", EXAMPLE, "torchrun", 2, 2, "plain"),
                                                            *((job, LIGHTNING, "torchrun", *shape, "lightning")
                                                              for job, shape in LIGHTNING_SHAPES.items()),
                                                            ("native", LIGHTNING, "srun", 1, 1, "lightning-native"),
                                                            ("importing", slow, "torchrun", 2, 1, "plain"),
                                                            ("ignores", ignores, "srun", 1, 1, "plain"),
                                                            ("crashes", crashes, "srun", 1, 1, "plain")):
        if name not in wanted:
            continue
        run_dir = tmp / f"run-{name}"
        native = ["--native"] if framework == "lightning-native" else []
        batch = _generate(tmp, name, script, launcher, nodes, procs, "--steps", str(STEPS), "--batch-size", "32",
                          "--print-every", "1", "--trace", str(run_dir / "trace.txt"), *native, framework=framework)
        started[name] = _submit(slurm_cluster, batch, run_dir)
    if "staged" in wanted:
        started["staged"] = _submit_staged(slurm_cluster, tmp, data)
    _signal_each_at_its_moment(slurm_cluster, started)
    _release_each_requeued(slurm_cluster, started)
    return started


def _submit_staged(cluster: SlurmCluster, tmp: Path, data: Path) -> Job:
    """The data-path example on 2 nodes, DATA staged to each node's own folder first (the test nodes share this
    machine's disk: '$SLURMD_NODENAME' in STAGE_DIR, expanded on each node, as '$TMPDIR' is on a real cluster)."""
    run_dir = tmp / "run-staged"
    batch = _generate(tmp, "staged", IMAGES, "torchrun", 2, 1, "--arch", "resnet18", "--image-size", "32",
                      "--batch-size", "8", "--workers", "1", "--epochs", str(STAGED_EPOCHS), "--print-every", "1",
                      "--trace", str(run_dir / "trace.txt"),
                      options=["--data", str(data), "--stage-dir", str(tmp / "stage" / "$SLURMD_NODENAME")])
    return _submit(cluster, batch, run_dir, f"--nodelist={','.join(STAGED_NODES)}")  # both runs on the same two


# the jobs that stop at the signal and ask for a requeue
REQUEUED = ("plain", *LIGHTNING_SHAPES, "native", "importing", "staged")


def _release_each_requeued(cluster: SlurmCluster, started: Dict[str, Job]) -> None:
    """Release every requeued job from SLURM's hold as soon as it may start, all at once: a test that waited for
    the tests before it would find its job started again by itself once the hold was over."""
    def release(job: Job) -> None:
        try:
            release_requeued(cluster, job.job_id)
        except Exception as exc:  # the job's own test reports it
            job.release_error = exc

    threads = [threading.Thread(target=release, args=(started[name],)) for name in REQUEUED if name in started]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _in_mid_run(job: Job) -> bool:
    return "step 4/" in job.log()


SIGNAL_WHEN = {  # job -> when its time-limit signal comes (none for a job that never runs long enough)
    "plain": _in_mid_run,
    **dict.fromkeys(LIGHTNING_SHAPES, _in_mid_run),
    "native": _in_mid_run,
    "importing": lambda job: len(list(job.run_dir.glob("importing-*"))) == 2,  # both nodes still importing
    "ignores": lambda job: "never asks whether to stop" in job.log(),
    "staged": _in_mid_run,
}


def _signal_each_at_its_moment(cluster: SlurmCluster, started: Dict[str, Job]) -> None:
    """Watch the jobs together and signal each as it reaches its moment: they train at once, none waits for
    another's test."""
    waiting = {name: job for name, job in started.items() if name in SIGNAL_WHEN}

    def signal_ready() -> bool:
        for name in [n for n, job in waiting.items() if SIGNAL_WHEN[n](job)]:
            _signal(cluster, waiting.pop(name))
        return not waiting

    try:
        wait_for("the jobs to reach their moment for the signal", signal_ready, 300, interval=0.2)
    except ClusterError as exc:
        raise ClusterError(f"{exc}; still waiting:\n" + "\n".join(_where(cluster, name, job)
                                                                 for name, job in waiting.items())) from None


def _where(cluster: SlurmCluster, name: str, job: Job) -> str:
    """What a job that has not reached its moment is doing: its state, why, and the end of its log."""
    state = cluster.job_state(job.job_id)
    return (f"{name} (job {job.job_id}): {state.get('JobState')} {state.get('Reason')}, log ends:\n"
            f"{job.log()[-1500:]}")


def _requeued_then_completed(cluster: SlurmCluster, job: Job) -> str:
    if job.release_error is not None:
        raise job.release_error
    row = cluster.wait_finished(job.job_id, timeout=240, runs=2)
    assert row["State"] == "COMPLETED", f"{row}\n{job.log()[-3000:]}"
    assert run_states(cluster, job.job_id) == ["REQUEUED", "COMPLETED"]
    return job.log()


def _every_step_once(job: Job, ranks: int, steps: int = STEPS) -> Counter:
    """Run -> steps trained, from the example's trace; each of STEPS steps on each rank exactly once."""
    lines = [line.split() for line in (job.run_dir / "trace.txt").read_text().splitlines()]
    trained = Counter((int(rank), int(step)) for rank, step, _ in lines)
    assert trained == Counter({(rank, step): 1 for rank in range(ranks) for step in range(steps)}), trained
    return Counter(int(run) for _, _, run in lines)


def test_a_plain_script_stopped_mid_run_resumes_at_the_exact_step(slurm_cluster: SlurmCluster, jobs) -> None:
    job = jobs["plain"]
    log = _requeued_then_completed(slurm_cluster, job)
    assert "USR2: asking the training processes to checkpoint" in log and "requeueing job" in log
    runs = _every_step_once(job, ranks=4)
    assert runs[0] >= 4 * 4 and runs[1] >= 4, runs  # both runs trained: the signal came in mid-run
    assert "resumed from" in log


@pytest.mark.parametrize("name", LIGHTNING_SHAPES, ids=_shape_id)
def test_a_lightning_script_with_the_callback_resumes_at_the_exact_step(slurm_cluster: SlurmCluster, jobs,
                                                                        name: str) -> None:
    """Under torchrun on several nodes and processes, where Lightning itself installs no requeue handler at all."""
    job = jobs[name]
    nodes, procs = LIGHTNING_SHAPES[name]
    ranks = nodes * procs
    log = _requeued_then_completed(slurm_cluster, job)
    assert "the script stopped at the stop request" in log and "Restored all states from the checkpoint" in log
    runs = _every_step_once(job, ranks=ranks)
    assert runs[0] >= ranks * 4 and runs[1] >= ranks, runs


def test_lightnings_own_requeue_under_srun_is_requeued_from_the_host_and_restored(slurm_cluster: SlurmCluster,
                                                                                 jobs) -> None:
    """Lightning's SLURMEnvironment saves its hpc_ckpt at the signal and calls scontrol: the batch file's stand-in,
    first on the tasks' PATH as in an image without one, marks the run folder and the host requeues."""
    job = jobs["native"]
    log = _requeued_then_completed(slurm_cluster, job)
    assert "Lightning saved its checkpoint and asked for a requeue; requeueing job" in log, log[-3000:]
    assert "Restored all states from the checkpoint" in log and "hpc_ckpt_1.ckpt" in log, log[-3000:]
    lines = [line.split() for line in (job.run_dir / "trace.txt").read_text().splitlines()]
    trained = {run: sorted({int(step) for rank, step, r in lines if r == run}) for run in ("0", "1")}
    assert trained["0"] and trained["1"], trained  # the signal came in mid-run
    assert set(trained["0"]) | set(trained["1"]) == set(range(STEPS))  # every step trained (some twice: Lightning
    # saves inside its handler, then goes on until the requeue ends it)
    assert trained["1"][0] <= trained["0"][-1] + 1 and trained["1"][-1] == STEPS - 1


def test_a_signal_during_the_scripts_imports_is_not_lost(slurm_cluster: SlurmCluster, jobs) -> None:
    job = jobs["importing"]
    _requeued_then_completed(slurm_cluster, job)
    runs = _every_step_once(job, ranks=2)
    assert runs[0] == 0 and runs[1] == 2 * STEPS, runs  # stopped before its first step, all of it after


def test_a_script_that_ignores_the_contract_ends_in_time_and_says_why(slurm_cluster: SlurmCluster, jobs) -> None:
    job = jobs["ignores"]
    row = slurm_cluster.wait_finished(job.job_id, timeout=120)
    log = job.log()
    assert row["State"] == "FAILED" and run_states(slurm_cluster, job.job_id) == ["FAILED"], f"{row}\n{log[-3000:]}"
    # the batch file writes the stop file, then forwards the signal: the watchdog names whichever it saw first
    assert re.search(r"did not stop within 30 s of the stop request \((SIGUSR2|stop\.requested)\)", log), log[-3000:]
    assert "not requeued: the script did not stop at the stop request" in log, log[-3000:]


def test_a_script_that_fails_at_every_start_spends_the_start_budget_then_stops(slurm_cluster: SlurmCluster,
                                                                              jobs) -> None:
    job = jobs["crashes"]
    row = slurm_cluster.wait_finished(job.job_id, timeout=180)
    log = job.log()
    assert row["State"] == "FAILED" and run_states(slurm_cluster, job.job_id) == ["FAILED"], f"{row}\n{log[-3000:]}"
    assert log.count("a script broken at start") == 4, log[-3000:]
    giving_up = [line for line in log.splitlines() if "giving up" in line]
    assert len(giving_up) == 1 and "after 4 start(s) in a row without a newer checkpoint (MAX_RESTARTS=3)" in \
        giving_up[0], log[-3000:]
    starts = (job.run_dir / "starts.log").read_text().splitlines()
    assert len({line.split()[0] for line in starts}) == 4, starts


def test_a_script_reads_its_nodes_staged_copy_and_resumes_mid_epoch_at_the_exact_batch(slurm_cluster: SlurmCluster,
                                                                                       jobs, data: Path) -> None:
    """--data and --stage-dir: the batch file copies DATA to each node before the script starts, the runner hands
    each node's processes their copy, the requeued run reuses the copies and resumes in mid-epoch."""
    job = jobs["staged"]
    log = _requeued_then_completed(slurm_cluster, job)
    copies = {node: destination(str(data), job.run_dir.parent / "stage" / node) for node in STAGED_NODES}
    assert all((copy / MARKER).is_file() for copy in copies.values()), log[-3000:]
    assert sum(log.count(f"reading {copy};") for copy in copies.values()) == 2, log[-3000:]  # rank 0, both runs
    assert log.count("reusing the complete staged copy") == 2, log[-3000:]  # the requeued run, on each node
    runs = _every_step_once(job, ranks=2, steps=STAGED_EPOCHS * 12)
    assert runs[0] >= 2 * 4 and runs[1] >= 2, runs
    assert "resumed at step" in log and "epoch 3/3 val top1" in log, log[-3000:]
