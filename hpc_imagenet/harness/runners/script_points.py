"""``bench scaling --script train.py``: the node-count sweep of your own training script, recorded and reported as
the engine's sweeps are.

    python -m hpc_imagenet.harness.bench scaling --script train.py --nodes 1 2 4 --gpus-per-node 4 \\
        --script-args "--epochs 1 --batch-size 64" --tag mycluster

Each point is the batch file ``hpc_imagenet.slurm.generate --script`` writes for that many nodes (torchrun or srun,
``--framework`` as there), without the requeue: a point is one run. The script times its steps through the
requeue contract (``hpc_imagenet.requeue.step_done(images)`` after each step, or the Lightning callback), into
its run folder's ``steps.tsv`` (hpc_imagenet/requeue/steps.py); a point's record is a ``train`` record whose
images/s are those of the steady steps: each run's first WARMUP steps are start-up (the loaders filling, the first
collectives, a compiler) and are left out, as the engine leaves out its own warm-up. A script that records no
steps fails its point with one line saying how to add them.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.runners.common import BenchError, environment, repo_relative
from hpc_imagenet import requeue
from hpc_imagenet.requeue import steps
from hpc_imagenet.slurm import client as slurm_client
from hpc_imagenet.slurm.generate import GenerateError, render, spec_from_args

WARMUP_STEPS = 5
NO_STEPS = ("the script recorded no steps ({path}): call hpc_imagenet.requeue.step_done(images) after each "
            "training step (the Lightning callback does), then run the sweep again")


@dataclass(frozen=True)
class ScriptPoint:
    """One run of the user's script: the record's point fields (kinds.TrainPoint) it can name."""

    script: str
    nodes: int
    procs_per_node: int
    framework: str = "plain"
    data: Optional[str] = None
    extra_args: Tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"script_{Path(self.script).stem}_n{self.nodes}x{self.procs_per_node}"

    def as_record(self, batch_size: Optional[int] = None) -> Dict[str, object]:
        return {"variant": "script", "arch": Path(self.script).name, "nodes": self.nodes,
                "procs_per_node": self.procs_per_node, "world_size": self.nodes * self.procs_per_node,
                "data": self.data, "batch_size": batch_size, "extra_args": [f"--framework={self.framework}",
                                                                           *self.extra_args]}


def batch_file(point: ScriptPoint, args: argparse.Namespace, log_dir: Path) -> str:
    """The generator's batch file for POINT (one line, as BenchError, where it refuses the settings)."""
    argv = ["--script", point.script, "--framework", point.framework, "--launcher", args.launcher,
            "--name", f"bench-{point.name}"[:60], "--nodes", str(point.nodes), "--gpus-per-node",
            str(args.gpus_per_node), "--procs-per-node", str(point.procs_per_node), "--time", args.time,
            "--no-requeue", "--python", args.python or ("python" if args.setup else sys.executable),
            "--output", str(log_dir / "slurm-%j.out")]
    argv += [arg for flag in ("partition", "account", "qos", "constraint") if getattr(args, flag, None)
             for arg in (f"--{flag}", getattr(args, flag))]
    argv += [arg for line in args.setup for arg in ("--setup", line)]
    argv += ["--cpus-per-task", str(args.cpus_per_task)] if args.cpus_per_task else []
    argv += ["--data", point.data] if point.data else []
    argv += ["--env", f"{requeue.MEASURED_ENV}=1"]  # the steps' times, and what rank 0 ran on
    try:
        return render(spec_from_args([*argv, "--", *point.extra_args]))
    except GenerateError as exc:
        raise BenchError(f"--script: {exc}") from None


def points(args: argparse.Namespace, nodes: List[int]) -> List[ScriptPoint]:
    if not Path(args.script).is_file():
        raise BenchError(f"--script {args.script}: no such file here; give its path from the folder you run from")
    procs = args.gpus_per_node or args.procs_per_node
    data = None if args.data == "dummy" else args.data
    return [ScriptPoint(args.script, n, procs, args.framework, data, tuple(shlex.split(args.script_args or "")))
            for n in sorted(set(nodes))]


def metrics(path: Path, world_size: int, warmup: int = WARMUP_STEPS) -> Dict[str, object]:
    """The record's numbers from a run folder's steps.tsv (ValueError, one line, when it has too few steps)."""
    if not path.is_file():
        raise ValueError(NO_STEPS.format(path=path.name))
    runs = [run[warmup:] for run in steps.segments(path) if len(run) >= warmup + 2]
    if not runs:
        raise ValueError(f"{path.name} has no run of more than {warmup + 1} steps: train longer (the first "
                         f"{warmup} steps of each run are start-up, not speed)")
    images = sum(count for run in runs for _, count in run[1:])  # the steps between each run's first and last
    seconds = sum(run[-1][0] - run[0][0] for run in runs)
    step_s = [b[0] - a[0] for run in runs for a, b in zip(run, run[1:])]
    per_step = statistics.median(count for run in runs for _, count in run)
    return {"images_per_s": images / seconds, "images_per_s_per_process": images / seconds / world_size,
            "step_time_ms": 1000 * statistics.median(step_s), "world_size": world_size,
            "measured_steps": len(step_s), "warmup_steps": warmup, "global_batch": int(per_step),
            "epochs_run": None, "engine_status": "finished"}


def record(point: ScriptPoint, sweep: str, scratch: Path, submit_error: Optional[str], extra: dict) -> dict:
    """A point's record from its run folder and its job's last line (failed, with the log's tail, where the job
    could not be submitted, the script failed or it recorded too few steps)."""
    world = point.nodes * point.procs_per_node
    status = exit_status(scratch)
    try:
        if submit_error:
            raise ValueError(submit_error)
        found = metrics(scratch / steps.STEPS_FILE, world)
        error = None if status == 0 else f"the script exited with {status}: {_tail(scratch)}"
    except ValueError as exc:
        found, error = {}, f"{exc}; {_tail(scratch)}"
    batch = found.get("global_batch") // world if found.get("global_batch") else None
    return records.make_record("train", sweep, point.as_record(batch), {**found, "nodes": point.nodes},
                               nodes_environment(scratch, point.nodes), "failed" if error else "ok", error,
                               run_dir=repo_relative(scratch), **extra)


def nodes_environment(scratch: Path, nodes: int) -> Dict[str, object]:
    """What rank 0 ran on (the runner's environment.json), else this host's: a script that failed early."""
    try:
        return json.loads((scratch / requeue.ENVIRONMENT_FILE).read_text())
    except (OSError, ValueError):
        return environment(nodes)


def exit_status(scratch: Path) -> Optional[int]:
    """The script's exit status, from the batch file's last line ("training exited with status N"), else None."""
    found = re.findall(r"training exited with status (\d+)", slurm_client.job_output(scratch, lines=20))
    return int(found[-1]) if found else None


def _tail(scratch: Path) -> str:
    lines = slurm_client.job_output(scratch, lines=3).splitlines()
    return lines[-1] if lines else "no job output"


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--script: your own training script instead of the engine")
    group.add_argument("--script", help="your training script (its path from here); it records its steps with "
                       "hpc_imagenet.requeue.step_done (docs/slurm.md, Your own script)")
    group.add_argument("--script-args", help="the script's own flags, as one quoted string")
    group.add_argument("--framework", default="plain", choices=["plain", "lightning"], help="as the generator's")
    group.add_argument("--launcher", default="torchrun", choices=["torchrun", "srun"], help="as the generator's")
