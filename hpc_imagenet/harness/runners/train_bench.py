"""Training throughput points: run the engine once per point and turn its run.json into a record.

A point is (variant, processes per node, nodes, batch per process, precision, data). Locally it
runs through ``torchrun --standalone`` on the devices present; with ``--submit slurm`` it becomes
one batch job per point, written by :mod:`hpc_imagenet.slurm.generate` and submitted with ``sbatch --wait``.
The engine measures steady-state throughput itself (warm-up steps excluded, device synced only
at timing boundaries); this module only launches, collects and keeps the run's TensorBoard
events next to the record (checkpoints are left in the scratch folder: they are large).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hpc_imagenet.imagenet.common.files import atomic_write, write_text
from hpc_imagenet.imagenet.common.variants import SCRIPTS, SINGLE_PROCESS
from hpc_imagenet.launch import launchers
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.records import RESULTS_DIR, portable
from hpc_imagenet.harness.core.setups import SETUPS
from hpc_imagenet.harness.runners.common import environment, last_line, repo_relative
from hpc_imagenet.slurm import client as slurm_client

log = logging.getLogger(__name__)

REPO = RESULTS_DIR.parent
# What each point's variant runs: the engine's entry scripts, and the bare loop the engine is measured against
SCRIPTS_RUN = {**SCRIPTS, "bare": "hpc_imagenet/harness/runners/bare_loop.py",
               "lightning": "hpc_imagenet/harness/runners/lightning_loop.py"}
ONE_PROCESS = (*SINGLE_PROCESS, "bare")


@dataclass(frozen=True)
class TrainPoint:
    """One training run of the sweep."""

    variant: str = "ddp"
    procs_per_node: int = 1
    nodes: int = 1
    batch_size: int = 16
    precision: str = "O0"
    amp_dtype: Optional[str] = None
    data: str = "dummy"  # or a dataset directory
    arch: str = "resnet18"
    image_size: int = 64
    epochs: int = 1
    steps_per_epoch: int = 20
    val_steps: int = 1
    workers: int = 0
    extra_args: Tuple[str, ...] = field(default=())
    setup: Optional[str] = None  # a SETUPS name: variant, precision and flags come from it

    @property
    def world_size(self) -> int:
        return self.procs_per_node * self.nodes

    @property
    def name(self) -> str:
        data = "dummy" if self.data == "dummy" else Path(self.data).name
        setup = f"{self.setup}_" if self.setup else ""
        return (f"{setup}{self.variant}_{self.arch}_n{self.nodes}x{self.procs_per_node}_b{self.batch_size}_"
                f"{self.precision}{'-' + self.amp_dtype if self.amp_dtype else ''}_{data}")


def from_setup(point: TrainPoint, name: str) -> TrainPoint:
    """``point`` with the variant, precision and flags of setup ``name`` (its own extra flags kept last)."""
    s = SETUPS[name]
    return replace(point, setup=name, variant=s.variant, precision=s.precision, amp_dtype=s.amp_dtype,
                   extra_args=s.flags + tuple(point.extra_args))


def engine_args(point: TrainPoint, log_dir: Path, for_slurm: bool = False, cpu: Optional[bool] = None) -> List[str]:
    """The entry script's flags for a point (pytorch/examples names).

    ``for_slurm`` leaves out what hpc_imagenet.slurm.generate sets itself (arch, epochs, batch, workers, data, and
    the log dir: LOG_DIR, set at submit time). ``cpu``: the processes run without GPUs (gloo); default:
    this machine has no CUDA (a SLURM job's nodes are not this machine: its runner says).
    """
    args = [] if for_slurm else ["-a", point.arch, "--epochs", str(point.epochs), "-b", str(point.batch_size),
                                 "--workers", str(point.workers), "--log-dir", str(log_dir)]
    args += ["--image-size", str(point.image_size), "--steps-per-epoch", str(point.steps_per_epoch),
             "--val-steps", str(point.val_steps), "--opt-level", point.precision]
    if point.amp_dtype:
        args += ["--amp-dtype", point.amp_dtype]
    if cpu is None:
        import torch
        cpu = not torch.cuda.is_available()
    if point.variant not in ONE_PROCESS and cpu:
        args += ["--dist-backend", "gloo"]
    if point.data == "dummy":
        args.append("--dummy")
    elif not for_slurm:
        args.append(str(point.data))
    return args + list(point.extra_args)


def check(point: TrainPoint) -> Optional[str]:
    """Why a point cannot run as given, or None."""
    if point.variant not in SCRIPTS_RUN:
        return f"unknown variant {point.variant!r}; use one of {', '.join(SCRIPTS)}"
    if point.variant in ONE_PROCESS and point.world_size != 1:
        return f"variant {point.variant} runs one process; use --procs 1 --nodes 1 (DataParallel uses all local GPUs)"
    if point.data != "dummy" and not Path(point.data).is_dir():
        return f"dataset directory {point.data} does not exist; pass a folder with train/ and val/ or 'dummy'"
    return None


# ---------------------------------------------------------------- runners

@dataclass
class Outcome:
    returncode: int
    log_tail: str
    command: str
    wall_s: float


class LocalRunner:
    """torchrun on this machine; nodes > 1 cannot run here."""

    name = "local"

    def __init__(self, timeout_s: float = 1800):
        self.timeout_s = timeout_s

    def run(self, point: TrainPoint, log_dir: Path) -> Outcome:
        if point.nodes != 1:
            raise RuntimeError(f"{point.nodes} nodes cannot run locally; use --submit slurm on a cluster")
        node = launchers.Node("1", str(point.procs_per_node))  # one node on its own (torchrun --standalone)
        cmd = launchers.get("torchrun").node_command(node, sys.executable, (str(REPO / SCRIPTS_RUN[point.variant]),
                                                                             *engine_args(point, log_dir)))
        log_path, t0 = log_dir / "bench.log", time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as out:
            try:
                rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=self.timeout_s,
                                    env=child_env(), cwd=REPO).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        tail = log_path.read_text(errors="replace").strip().splitlines()[-200:]
        return Outcome(rc, "\n".join(tail), " ".join(cmd), time.monotonic() - t0)


class SlurmRunner:
    """One batch job per point: hpc_imagenet.slurm.generate writes it, sbatch submits it, squeue watches it.

    The cluster is the one ``sbatch`` finds (``SLURM_CONF`` in this environment); the job runs
    from this checkout (its submit directory). ``sbatch_options`` are JobSpec fields (partition,
    account, qos, constraint, setup, python); without a ``python`` the job uses this interpreter,
    or ``python`` as the setup lines leave it when there are any.
    """

    name = "slurm"

    def __init__(self, gpus_per_node: int, time_limit: str = "01:00:00", timeout_s: float = 6 * 3600,
                 cpus_per_task: Optional[int] = None, **sbatch_options: object):
        self.gpus_per_node, self.time_limit, self.timeout_s = gpus_per_node, time_limit, timeout_s
        self.cpus_per_task = cpus_per_task
        self.options = {k: v for k, v in sbatch_options.items() if v not in (None, (), [])}
        self.options.setdefault("python", "python" if self.options.get("setup") else sys.executable)

    @classmethod
    def from_args(cls, args, time_limit: str, timeout_s: Optional[float] = None, **more: object) -> "SlurmRunner":
        """The runner of the sbatch flags (add_sbatch_flags) of a bench command."""
        return cls(args.gpus_per_node, time_limit, timeout_s=timeout_s, cpus_per_task=args.cpus_per_task,
                   partition=args.partition, account=args.account, qos=args.qos, constraint=args.constraint,
                   setup=tuple(args.setup), **more)

    def script(self, point: TrainPoint, log_dir: Path) -> str:
        from hpc_imagenet.slurm import generate
        train_args = tuple(engine_args(point, log_dir, for_slurm=True, cpu=not self.gpus_per_node))
        spec = generate.JobSpec(name=f"bench-{point.name}"[:60], nodes=point.nodes, gpus_per_node=self.gpus_per_node,
                                procs_per_node=point.procs_per_node, cpus_per_task=self.cpus_per_task, requeue=False,
                                variant=point.variant, data=str(point.data), arch=point.arch, epochs=point.epochs,
                                batch_size=point.batch_size, workers=point.workers, train_args=train_args,
                                time=self.time_limit, output=str(log_dir / "slurm-%j.out"), **self.options)
        return generate.render(spec)

    @staticmethod
    def sbatch_argv(log_dir: Path) -> List[str]:
        return [f"--export=ALL,LOG_DIR={log_dir}"]

    def outcome(self, log_dir: Path, returncode: int, t0: float) -> Outcome:
        """How the job in LOG_DIR went: its own output (the engine log) is what explains a failure."""
        cmd = " ".join(["sbatch", *self.sbatch_argv(log_dir), str(log_dir / "job.sh")])
        return Outcome(returncode, slurm_client.job_output(log_dir), cmd, time.monotonic() - t0)

    def run(self, point: TrainPoint, log_dir: Path) -> Outcome:
        log_dir.mkdir(parents=True, exist_ok=True)
        write_text(log_dir / "job.sh", self.script(point, log_dir))
        t0, rc = time.monotonic(), 0
        job = slurm_client.submit(log_dir / "job.sh", self.sbatch_argv(log_dir), cwd=REPO, env=child_env())
        log.info("    submitted SLURM job %s", job)
        try:
            slurm_client.wait([job], lambda j, state: log.info(
                "    job %s %s", j, state.lower() if state == slurm_client.DONE else state), self.timeout_s)
        except slurm_client.Timeout:  # the job has been cancelled: none is left queued or running
            rc = 124
        return self.outcome(log_dir, rc, t0)


def add_sbatch_flags(parser, when: str = "") -> None:
    """The sbatch options of a bench command that submits jobs (train --submit slurm, scaling); WHEN starts
    their help."""
    parser.add_argument("--cpus-per-task", type=int, help=f"{when}CPUs per SLURM task (default: "
                                                          f"hpc_imagenet.slurm.generate's, "
                        "8 per process); also each process's OMP_NUM_THREADS")
    for flag in ("--partition", "--account", "--qos", "--constraint"):
        parser.add_argument(flag, help=f"{when}sbatch {flag}")
    parser.add_argument("--setup", action="append", default=[], metavar="LINE", help=f"{when}shell line each "
                        "job runs first, e.g. 'module load cuda' or 'source ENV/bin/activate' (repeatable)")


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ---------------------------------------------------------------- run.json -> metrics

def metrics_from_run(run: dict) -> Dict[str, object]:
    """The record's numbers from the engine's run.json (raises KeyError on a partial file)."""
    tp = run["throughput"]
    epochs = run.get("epochs", [])
    train_times = [e["train_time_s"] for e in epochs if "train_time_s" in e]
    last = epochs[-1] if epochs else {}
    m = {k: tp[k] for k in ("images_per_s", "images_per_s_per_process", "step_time_ms", "data_time_ms",
                            "compute_time_ms", "warmup_steps", "measured_steps", "peak_memory_bytes")}
    saves = run.get("checkpoints") or {}
    m.update({f"checkpoint_{k}": saves.get(k) for k in ("saves", "periodic", "stall_ms_mean", "stall_ms_max",
                                                        "write_s_mean", "bytes_written", "every_steps")})
    if "step_times_ms" in tp:  # --extra=--step-times: the distribution behind the scaling model's straggler term
        m["step_times_ms"] = tp["step_times_ms"]
    # where a steady step's time goes (medians): the loader, the host's loop, the device's stream
    m.update({key: (tp.get("breakdown") or {}).get(key) for key in ("data_wait_ms", "host_ms", "device_ms")})
    m.update({"world_size": run["dist"]["world_size"], "nodes": run["dist"].get("nodes", 1),
              "device": run["dist"].get("device"), "backend": run["dist"].get("backend"),
              "global_batch": run.get("global_batch"), "precision_label": run.get("precision", {}).get("label"),
              "epoch_time_s": train_times[-1] if train_times else None, "epochs_run": len(epochs),
              "elapsed_s": run.get("final", {}).get("elapsed_s"), "best_top1": run.get("final", {}).get("best_top1"),
              "val_top1": last.get("val_top1"), "val_top5": last.get("val_top5"),
              "engine_status": run.get("status")})
    return m


def keep_artifacts(scratch: Path, keep: Path) -> List[str]:
    """Copy what the report reads to ``keep``: run.json (machine paths removed) and the TensorBoard
    events. Checkpoints, logs and the job file stay in the scratch folder."""
    keep.mkdir(parents=True, exist_ok=True)
    kept = []
    for f in sorted(scratch.iterdir()):
        if f.name == "run.json":
            write_text(keep / f.name, json.dumps(portable(json.loads(f.read_text())), indent=1) + "\n")
        elif f.name.startswith("events.out.tfevents"):
            atomic_write(keep / f.name, lambda out, src=f: _write_scalars(src, out))
        else:
            continue
        kept.append(f.name)
    return kept


def _write_scalars(src: Path, out) -> None:
    """A copy of a TensorBoard event file with only its scalars (the curves the report draws): the
    config text and hparams summaries hold the run's machine paths."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    writer = RecordWriter(out)
    for raw in RawEventFileLoader(str(src)).Load():
        event = event_pb2.Event.FromString(raw)
        if event.WhichOneof("what") == "summary":
            values = [v for v in event.summary.value if v.WhichOneof("value") == "simple_value"]
            if not values:
                continue
            del event.summary.value[:]
            event.summary.value.extend(values)
        writer.write(event.SerializeToString())
    writer.flush()


def point_dict(point: TrainPoint) -> Dict[str, object]:
    return {**asdict(point), "extra_args": list(point.extra_args), "world_size": point.world_size}


# ---------------------------------------------------------------- records

def failed_train_record(point: TrainPoint, sweep: str, error: str, extra: dict) -> dict:
    return records.make_record("train", sweep, point_dict(point), {}, environment(point.nodes), "failed",
                               error, **extra)


def train_record(point: TrainPoint, out: Outcome, sweep: str, params: Optional[int],
                 extra: dict, scratch: Path, keep: Path, keep_checkpoints: bool = False) -> dict:
    """The record of a point that ran (well or not), from the run.json it left in ``scratch``;
    what the report reads is kept in ``keep``."""
    extra = {**extra, "command": portable(out.command), "wall_s": out.wall_s}
    try:
        if not (scratch / "run.json").exists():
            raise FileNotFoundError(f"the run wrote no {scratch / 'run.json'}")
        run = json.loads((scratch / "run.json").read_text())
        metrics = metrics_from_run(run)
    except (OSError, ValueError, KeyError) as e:
        error = f"exit code {out.returncode}; {type(e).__name__}: {e}; log tail: {last_line(out.log_tail)}"
        return failed_train_record(point, sweep, error, extra)
    metrics["parameters"] = params
    if run.get("profile"):  # --profile-steps: where the step's device time went, kernel by kernel
        extra["profile"] = portable(run["profile"])
    if run.get("startup"):  # where the time before the first step went, stage by stage
        extra["startup"] = run["startup"]
    extra["run_dir"] = repo_relative(keep)
    extra["kept_files"] = keep_artifacts(scratch, keep)
    if not keep_checkpoints:
        shutil.rmtree(scratch, ignore_errors=True)
    status, error = "ok", None
    if out.returncode != 0 or run.get("status") != "finished":
        status, error = "failed", f"exit code {out.returncode}, engine status {run.get('status')}: " \
                                  f"{last_line(out.log_tail)}"
    return records.make_record("train", sweep, point_dict(point), metrics,
                               portable(run.get("environment") or environment()), status, error,
                               **extra)
