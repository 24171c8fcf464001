"""Submit training from Python with submitit: a SLURM job (one task per GPU), or a local run where
there is no SLURM; sweeps submit one job per point; preemption checkpoints and requeues.

    python -m hpc_imagenet.slurm.submit --nodes 2 --gpus-per-node 4 --time 1:00:00 -- -a resnet50 /data/imagenet
    python -m hpc_imagenet.slurm.submit --sweep nodes=1,2,4 --wait -- -a resnet50 --epochs 1 /data/imagenet

    from hpc_imagenet.slurm.submit import Submission, result, submit
    job = submit(Submission(nodes=2, train_args=("-a", "resnet50", "/data/imagenet")))
    print(job.job_id, job.paths.stdout, result(job))

The job's shape and resources (name, nodes, GPUs and processes per node, CPUs, memory, time, partition,
account, qos, constraint, variant, training flags) are hpc_imagenet/slurm/job.py's description, with its checks and
options: the same as ``python -m hpc_imagenet.slurm.generate`` takes. ``--time-min``/``time_min`` and
``--mem-gb``/``mem_gb`` remain as other spellings of ``--time`` and ``--mem``.

Requeue: submitit asks SLURM for SIGUSR2 ``signal_delay_s`` before the time limit (and sends it
on preemption). The trainer catches it, stops at a safe step, saves its checkpoint in the run
folder and returns 75; :class:`TrainingTask` then hands over to submitit's own handler, which
requeues the job with the same task, and the restarted task resumes (``--resume auto``).
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common.exit_codes import EXIT_PREEMPTED, EXIT_USAGE
from hpc_imagenet.slurm.job import JobError, JobShape, add_options, check, check_signal, check_unmanaged

SWEEPABLE = {"nodes": int, "gpus_per_node": int, "procs_per_node": int, "batch_size": int}
# the trainer's settings a submission sets itself -> what to use instead
MANAGED = {"log_dir": "log_dir=... (--log-dir of hpc_imagenet.slurm.submit)", "resume": "nothing (always --resume "
                                                                                        "auto)"}

SubmitError = JobError  # a submission that cannot work; the message is one line saying what to change


class TrainingFailed(RuntimeError):
    """The training process exited with an error status; job.result() raises it."""


@dataclass(frozen=True)
class Submission(JobShape):
    """One training job: the shared job description (hpc_imagenet/slurm/job.py; ``train_args`` are the imagenet flags,
    dataset last, as on the command line) plus what submitit needs. ``time_min`` and ``mem_gb`` are the
    older spellings of ``time`` and ``mem``; when given they set those."""

    gpus_per_node: int = 0  # 0: CPU nodes (then procs_per_node processes each)
    time: str = "60"  # minutes, or any SLURM time limit
    folder: str = "runs/submitit/%j"  # submitit's logs and pickles
    log_dir: Optional[str] = None  # the run folder (checkpoints, run.json); default runs/submitit/<name>
    cluster: Optional[str] = None  # None: SLURM if sbatch exists, else local; or "slurm", "local", "debug"
    signal_delay_s: int = 120
    max_requeues: int = 3
    batch_size: Optional[int] = None  # appended as -b when set (sweeps vary it)
    extra_slurm: Tuple[Tuple[str, str], ...] = field(default=())
    time_min: Optional[int] = None  # the time limit in minutes: sets time
    mem_gb: Optional[float] = None  # memory per node in GB: sets mem

    def __post_init__(self) -> None:
        if self.time_min is not None:
            object.__setattr__(self, "time", str(self.time_min))
        if self.mem_gb is not None:
            gb = float(self.mem_gb)
            object.__setattr__(self, "mem", f"{int(gb)}G" if gb.is_integer() else f"{math.ceil(gb * 1024)}M")

    @property
    def run_dir(self) -> str:
        return self.log_dir or f"runs/submitit/{self.name}"

    @property
    def timeout_min(self) -> int:
        return math.ceil(self.time_seconds / 60)

    def argv(self) -> List[str]:
        """The trainer's command line: the given flags plus this submission's run folder and resume."""
        args = list(self.train_args)
        if self.batch_size is not None:
            args[:0] = ["-b", str(self.batch_size)]
        return ["--log-dir", self.run_dir, "--resume", "auto", *args]


def validate(sub: Submission) -> None:
    """Raise SubmitError (one line): the shared job checks, then the submission's own."""
    check(sub)
    check_signal("--signal-delay-s", sub.signal_delay_s, sub.time)
    check_unmanaged(sub.train_args, MANAGED, "set by the submission")


# ---------------------------------------------------------------------------------------------
# what runs in every task


class TrainingTask:
    """The callable submitit pickles: one training process per task, torch's variables from the
    task environment, and preemption handled by the trainer first, then by submitit."""

    def __init__(self, variant: str, argv: Sequence[str]):
        self.variant, self.argv = variant, list(argv)

    def __call__(self) -> Dict[str, Any]:
        import submitit

        env = submitit.JobEnvironment()
        _export_rendezvous(env)
        submitit_handler = signal.getsignal(signal.SIGUSR2)  # the trainer replaces it while training
        from hpc_imagenet.imagenet.run.train_command import main

        code = main(self.variant, self.argv)
        if code == EXIT_PREEMPTED:
            self._requeue(env, submitit_handler)
        if code != 0:
            raise TrainingFailed(f"training exited with status {code} on rank {env.global_rank} "
                                 f"({env.hostname}); see the job's stderr log")
        return {"rank": env.global_rank, "world_size": env.num_tasks, "run_dir": self._run_dir(),
                **_run_summary(self._run_dir())}

    def checkpoint(self, *args: Any, **kwargs: Any):
        """submitit calls this on preemption: run this same task again (it resumes from the run folder)."""
        import submitit

        return submitit.helpers.DelayedSubmission(TrainingTask(self.variant, self.argv))

    def _run_dir(self) -> str:
        return self.argv[self.argv.index("--log-dir") + 1]

    @staticmethod
    def _requeue(env, submitit_handler) -> None:
        """The checkpoint is saved; let submitit requeue the job (rank 0), the others wait for it."""
        if env.global_rank == 0 and callable(submitit_handler):
            submitit_handler(signal.SIGUSR2, None)  # checkpoint() + scontrol requeue + exit
        deadline = time.monotonic() + 120  # the requeue ends this process; do not report a result
        while time.monotonic() < deadline:
            time.sleep(1)
        raise TrainingFailed("preempted, and the job was not requeued within 120 s")


def _export_rendezvous(env) -> None:
    """Under SLURM the trainer reads SLURM's own variables; elsewhere (local executor) give it torch's."""
    from hpc_imagenet.launch.ports import derive_port

    os.environ.setdefault("MASTER_ADDR", env.hostnames[0] if env.num_nodes > 1 else "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(derive_port(str(env.job_id).split("_")[0])))
    if "SLURM_STEP_NUM_TASKS" not in os.environ and env.num_tasks > 1:
        os.environ.update(RANK=str(env.global_rank), LOCAL_RANK=str(env.local_rank),
                          WORLD_SIZE=str(env.num_tasks), LOCAL_WORLD_SIZE=str(env.num_tasks // env.num_nodes),
                          GROUP_RANK=str(env.node))


def _run_summary(run_dir: str) -> Dict[str, Any]:
    import json

    path = Path(run_dir) / "run.json"
    if not path.exists():
        return {}
    record = json.loads(path.read_text())
    return {k: record.get(k) for k in ("status", "final", "dist")}


# ---------------------------------------------------------------------------------------------
# submission


def make_executor(sub: Submission):
    import submitit

    executor = submitit.AutoExecutor(folder=sub.folder, cluster=sub.cluster, slurm_max_num_timeout=sub.max_requeues)
    params: Dict[str, Any] = dict(name=sub.name, nodes=sub.nodes, tasks_per_node=sub.tasks,
                                  cpus_per_task=sub.cpus, timeout_min=sub.timeout_min)
    if sub.gpus_per_node:
        params["gpus_per_node"] = sub.gpus_per_node
    # the site's options as the batch files write them (the time limit is timeout_min, for every executor)
    params.update({f"slurm_{k}": v for k, v in sub.site() if k != "time"})
    if executor.cluster == "slurm":
        params.update(slurm_signal_delay_s=sub.signal_delay_s,
                      slurm_additional_parameters={"requeue": True, **dict(sub.extra_slurm)})
    executor.update_parameters(**params)
    return executor


def submit(sub: Submission):
    """Submit one training job; returns the submitit Job (job_id, paths.stdout, result())."""
    validate(sub)
    return make_executor(sub).submit(TrainingTask(sub.variant, sub.argv()))


def result(job) -> Dict[str, Any]:
    """Rank 0's summary once the job ends (raises the task's error if it failed)."""
    return job.results()[0]


def sweep_points(sub: Submission, sweep: Dict[str, Sequence[str]]) -> List[Submission]:
    """One Submission per point of the product; each point gets its own name and run folder."""
    for key in sweep:
        if key not in SWEEPABLE:
            raise SubmitError(f"cannot sweep {key!r}; choose from {', '.join(SWEEPABLE)}")
    points = []
    for combo in itertools.product(*sweep.values()):
        values = {k: SWEEPABLE[k](v) for k, v in zip(sweep, combo)}
        tag = "_".join(f"{k}{v}" for k, v in values.items())
        points.append(replace(sub, name=f"{sub.name}_{tag}", log_dir=f"{sub.run_dir}/{tag}", **values))
    return points


def submit_sweep(sub: Submission, sweep: Dict[str, Sequence[str]]) -> list:
    """Scaling sweeps vary nodes/GPUs, which one job array cannot: one job per point."""
    points = sweep_points(sub, sweep)
    for point in points:
        validate(point)
    return [make_executor(point).submit(TrainingTask(point.variant, point.argv())) for point in points]


# ---------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.slurm.submit", description=__doc__.split("\n")[0],
                                allow_abbrev=False)
    d = Submission()
    add_options(p, d)  # the shared job description's fields: --name, --nodes, ..., --time, --variant
    for name in ("time_min", "signal_delay_s", "max_requeues"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    for name in ("folder", "log_dir", "cluster"):
        p.add_argument(f"--{name.replace('_', '-')}", default=getattr(d, name))
    p.add_argument("--mem-gb", type=float, default=None, help="memory per node in GB (the same as --mem NG)")
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help=f"one job per point of the product; keys: {', '.join(SWEEPABLE)}")
    p.add_argument("--wait", action="store_true", help="wait for the results and print them")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then the training flags and DATA")
    return p


def _parse_sweep(items: Sequence[str]) -> Dict[str, List[str]]:
    sweep = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise SubmitError(f"--sweep {item!r}: expected KEY=V1,V2 (e.g. nodes=1,2,4)")
        sweep[key.replace("-", "_")] = values.split(",")
    return sweep


def submission_from_args(argv: Optional[Sequence[str]]) -> Tuple[Submission, List[str], bool]:
    """A submit command line -> the Submission, its --sweep items and --wait."""
    ns = vars(build_parser().parse_args(argv))
    train = ns.pop("train_args")
    wait, sweep = ns.pop("wait"), ns.pop("sweep")
    return Submission(train_args=tuple(train[1:] if train[:1] == ["--"] else train), **ns), sweep, wait


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        sub, sweep, wait = submission_from_args(argv)
        jobs = submit_sweep(sub, _parse_sweep(sweep)) if sweep else [submit(sub)]
    except ValueError as e:  # SubmitError among them
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for job in jobs:
        print(f"submitted job {job.job_id}: log {job.paths.stdout}")
    if not wait:
        return 0
    failed = 0
    for job in jobs:
        try:
            print(f"job {job.job_id}: {result(job)}")
        except Exception as e:  # submitit wraps the task's exception; report it and go on
            failed += 1
            print(f"job {job.job_id} failed: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    from hpc_imagenet.slurm.submit import main  # under its one name, not a copy
    sys.exit(main())
