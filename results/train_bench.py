"""Training throughput points: run the engine once per point and turn its run.json into a record.

A point is (variant, processes per node, nodes, batch per process, precision, data). Locally it
runs through ``torchrun --standalone`` on the devices present; with ``--submit slurm`` it becomes
one batch job per point, written by :mod:`slurm.generate` and submitted with ``sbatch --wait``.
The engine measures steady-state throughput itself (warm-up steps excluded, device synced only
at timing boundaries); this module only launches, collects and keeps the run's TensorBoard
events next to the record (checkpoints are left in the scratch folder: they are large).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {"nd": "imagenet/imagenet_nd.py", "dp": "imagenet/imagenet_dp.py",
           "ddp": "imagenet/imagenet_ddp.py", "amp": "imagenet/imagenet_ddp_apex.py"}
SINGLE_PROCESS = ("nd", "dp")
# Parameters that must match for two points to be compared in a scaling efficiency.
GROUP_KEYS = ("variant", "batch_size", "precision", "amp_dtype", "data", "arch", "image_size", "workers",
              "setup")
BASELINE_SETUP = "baseline"
LOG_QUIET_SETUP = "engine-log-epoch"
LOG_EVERY_STEP_SETUP = "engine-log-step"


@dataclass(frozen=True)
class Setup:
    """A named training-step configuration, compared at the same batch, data and process count."""

    variant: str
    precision: str
    amp_dtype: Optional[str]
    flags: Tuple[str, ...]
    about: str


# --setups: the pytorch/examples-style loop against the engine's defaults, same batch and data.
SETUPS: Dict[str, Setup] = {
    BASELINE_SETUP: Setup("ddp", "O0", None, ("--data-backend", "baseline", "--optimizer-impl", "default",
                                              "--no-channels-last"),
                          "pytorch/examples: PIL + ToTensor/Normalize float pipeline, for-loop SGD, NCHW, fp32"),
    "engine": Setup("ddp", "O0", None, (), "engine defaults (fast JPEG backend, optimizer auto, "
                                           "channels-last where it helps), fp32"),
    "engine-bf16": Setup("amp", "O1", "bfloat16", (), "imagenet_ddp_apex.py --opt-level O1 --amp-dtype bfloat16, "
                                                      "engine defaults otherwise"),
    "engine-fp16": Setup("amp", "O1", "float16", (), "imagenet_ddp_apex.py --opt-level O1 --amp-dtype float16 "
                                                     "(dynamic loss scaling), engine defaults otherwise"),
    "engine-fp16-compile": Setup("amp", "O1", "float16", ("--compile",), "engine-fp16 with --compile "
                                                                          "(torch.compile, default mode)"),
    "engine-fp16-device-decode": Setup("amp", "O1", "float16", ("--data-backend", "device"),
                                       "engine-fp16 with JPEGs decoded on the GPU (nvJPEG), not in the loader"),
    "engine-fp16-dali": Setup("amp", "O1", "float16", ("--data-backend", "dali"),
                              "engine-fp16 with NVIDIA DALI decoding and augmenting on the GPU (nvJPEG "
                              "region-of-interest decode)"),
    "engine-bf16-compile": Setup("amp", "O1", "bfloat16", ("--compile",), "engine-bf16 with --compile"),
    "engine-fp16-cudagraphs": Setup("amp", "O1", "float16", ("--compile-mode", "reduce-overhead"),
                                    "engine-fp16 with torch.compile mode reduce-overhead (CUDA graphs)"),
    "engine-fp16-max-autotune": Setup("amp", "O1", "float16", ("--compile-mode", "max-autotune"),
                                      "engine-fp16 with torch.compile mode max-autotune (benchmarked kernel "
                                      "choices, CUDA graphs)"),
    # The pair behind the logging-overhead ratio: the same run logging at every step vs only per epoch.
    LOG_QUIET_SETUP: Setup("ddp", "O0", None, ("-p", "1000000"), "engine defaults, logging only at epoch end"),
    LOG_EVERY_STEP_SETUP: Setup("ddp", "O0", None, ("-p", "1"), "engine defaults, printing and TensorBoard "
                                                               "step scalars at every step (a device sync each)"),
}


# What make bench compares on a CPU: fp16 there is emulated (tens of times slower) and compiling takes
# about a minute, so the fp16 and compile setups are for GPU machines (results/gpu_session.sh).
CPU_SETUPS = ("baseline", "engine", "engine-bf16", LOG_QUIET_SETUP, LOG_EVERY_STEP_SETUP)


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


def from_setup(p: TrainPoint, name: str) -> TrainPoint:
    """``p`` with the variant, precision and flags of setup ``name`` (its own extra flags kept last)."""
    s = SETUPS[name]
    return replace(p, setup=name, variant=s.variant, precision=s.precision, amp_dtype=s.amp_dtype,
                   extra_args=s.flags + tuple(p.extra_args))


def engine_args(p: TrainPoint, log_dir: Path, for_slurm: bool = False, cpu: Optional[bool] = None) -> List[str]:
    """The entry script's flags for a point (pytorch/examples names).

    ``for_slurm`` leaves out what slurm.generate sets itself (arch, epochs, batch, workers, data,
    log dir). ``cpu``: the processes run without GPUs (gloo); default: this machine has no CUDA
    (a SLURM job's nodes are not this machine: its runner says).
    """
    managed = ["-a", p.arch, "--epochs", str(p.epochs), "-b", str(p.batch_size), "--workers", str(p.workers)]
    args = [] if for_slurm else managed
    args += [] if for_slurm else ["--log-dir", str(log_dir)]  # slurm: LOG_DIR, set at submit time
    args += ["--image-size", str(p.image_size), "--steps-per-epoch", str(p.steps_per_epoch),
             "--val-steps", str(p.val_steps), "--opt-level", p.precision]
    if p.amp_dtype:
        args += ["--amp-dtype", p.amp_dtype]
    if p.variant not in SINGLE_PROCESS and (not _has_cuda() if cpu is None else cpu):
        args += ["--dist-backend", "gloo"]
    if p.data == "dummy":
        args.append("--dummy")
    elif not for_slurm:
        args.append(str(p.data))
    return args + list(p.extra_args)


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def check(p: TrainPoint) -> Optional[str]:
    """Why a point cannot run as given, or None."""
    if p.variant not in SCRIPTS:
        return f"unknown variant {p.variant!r}; use one of {', '.join(SCRIPTS)}"
    if p.variant in SINGLE_PROCESS and p.world_size != 1:
        return f"variant {p.variant} runs one process; use --procs 1 --nodes 1 (DataParallel uses all local GPUs)"
    if p.data != "dummy" and not Path(p.data).is_dir():
        return f"dataset directory {p.data} does not exist; pass a folder with train/ and val/ or 'dummy'"
    return None


def torchrun_command(p: TrainPoint, log_dir: Path) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={p.procs_per_node}", str(REPO / SCRIPTS[p.variant]), *engine_args(p, log_dir)]


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

    def run(self, p: TrainPoint, log_dir: Path) -> Outcome:
        if p.nodes != 1:
            raise RuntimeError(f"{p.nodes} nodes cannot run locally; use --submit slurm on a cluster")
        cmd = torchrun_command(p, log_dir)
        return _run_logged(cmd, log_dir / "bench.log", self.timeout_s, env=_child_env())


class SlurmRunner:
    """One batch job per point: slurm.generate writes it, sbatch submits it, squeue watches it.

    The cluster is the one ``sbatch`` finds (``SLURM_CONF`` in this environment); the job runs
    from this checkout (its submit directory). ``sbatch_options`` are JobSpec fields (partition,
    account, qos, constraint, setup, python); without a ``python`` the job uses this interpreter,
    or ``python`` as the setup lines leave it when there are any.
    """

    name = "slurm"

    def __init__(self, gpus_per_node: int, time_limit: str = "01:00:00", sbatch_args: Sequence[str] = (),
                 timeout_s: float = 6 * 3600, cpus_per_task: Optional[int] = None, **sbatch_options: object):
        self.gpus_per_node, self.time_limit = gpus_per_node, time_limit
        self.sbatch_args, self.timeout_s = list(sbatch_args), timeout_s
        self.cpus_per_task = cpus_per_task
        self.options = {k: v for k, v in sbatch_options.items() if v not in (None, (), [])}
        self.options.setdefault("python", "python" if self.options.get("setup") else sys.executable)

    def script(self, p: TrainPoint, log_dir: Path) -> str:
        from slurm import generate
        spec = generate.JobSpec(name=f"bench-{p.name}"[:60], nodes=p.nodes, gpus_per_node=self.gpus_per_node,
                                procs_per_node=p.procs_per_node, cpus_per_task=self.cpus_per_task,
                                variant=p.variant, data=str(p.data), arch=p.arch, epochs=p.epochs,
                                batch_size=p.batch_size, workers=p.workers,
                                train_args=tuple(engine_args(p, log_dir, for_slurm=True, cpu=not self.gpus_per_node)),
                                requeue=False,
                                time=self.time_limit, output=str(log_dir / "slurm-%j.out"), **self.options)
        return generate.render(spec)

    def write(self, p: TrainPoint, log_dir: Path) -> Path:
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / "job.sh"
        path.write_text(self.script(p, log_dir))
        return path

    def sbatch_argv(self, log_dir: Path) -> List[str]:
        return [f"--export=ALL,LOG_DIR={log_dir}", *self.sbatch_args]

    def run(self, p: TrainPoint, log_dir: Path) -> Outcome:
        from results import slurm_queue
        path = self.write(p, log_dir)
        t0, rc = time.monotonic(), 0
        try:
            slurm_queue.wait_one(path, self.sbatch_argv(log_dir), REPO, _child_env(), self.timeout_s)
        except slurm_queue.Timeout:  # the job has been cancelled: none is left queued or running
            rc = 124
        # the job's own output (engine log) is what explains a failure
        cmd = " ".join(["sbatch", *self.sbatch_argv(log_dir), str(path)])
        return Outcome(rc, slurm_queue.job_output(log_dir), cmd, time.monotonic() - t0)


def _child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _run_logged(cmd: List[str], log_path: Path, timeout_s: float, env: Dict[str, str]) -> Outcome:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, env=env,
                                cwd=REPO).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    tail = log_path.read_text(errors="replace").strip().splitlines()[-200:]
    return Outcome(rc, "\n".join(tail), " ".join(cmd), time.monotonic() - t0)


# ---------------------------------------------------------------- run.json -> metrics

def metrics_from_run(run: dict) -> Dict[str, object]:
    """The record's numbers from the engine's run.json (raises KeyError on a partial file)."""
    tp = run["throughput"]
    epochs = run.get("epochs", [])
    train_times = [e["train_time_s"] for e in epochs if "train_time_s" in e]
    last = epochs[-1] if epochs else {}
    m = {k: tp[k] for k in ("images_per_s", "images_per_s_per_process", "step_time_ms", "data_time_ms",
                            "compute_time_ms", "warmup_steps", "measured_steps", "peak_memory_bytes")}
    if "step_times_ms" in tp:  # --extra=--step-times: the distribution behind the scaling model's straggler term
        m["step_times_ms"] = tp["step_times_ms"]
    m.update({"world_size": run["dist"]["world_size"], "nodes": run["dist"].get("nodes", 1),
              "device": run["dist"].get("device"), "backend": run["dist"].get("backend"),
              "global_batch": run.get("global_batch"), "precision_label": run.get("precision", {}).get("label"),
              "epoch_time_s": train_times[-1] if train_times else None, "epochs_run": len(epochs),
              "elapsed_s": run.get("final", {}).get("elapsed_s"), "best_top1": run.get("final", {}).get("best_top1"),
              "val_top1": last.get("val_top1"), "val_top5": last.get("val_top5"),
              "engine_status": run.get("status")})
    return m


@functools.lru_cache(maxsize=None)  # the report asks for resnet50's several times; building it takes seconds
def parameter_count(arch: str, num_classes: int = 1000) -> Optional[int]:
    """Trainable parameters of a torchvision model (= gradient elements all-reduced per step)."""
    try:
        import torchvision
        model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
        return sum(t.numel() for t in model.parameters() if t.requires_grad)
    except Exception as e:  # an arch outside torchvision: the model just lacks this input
        log.warning("cannot count parameters of %s: %s", arch, e)
        return None


def keep_artifacts(scratch: Path, keep: Path) -> List[str]:
    """Copy what the report reads to ``keep``: run.json (machine paths removed) and the TensorBoard
    events. Checkpoints, logs and the job file stay in the scratch folder."""
    keep.mkdir(parents=True, exist_ok=True)
    kept = []
    for f in sorted(scratch.iterdir()):
        if f.name == "run.json":
            _write_atomic(keep / f.name, json.dumps(portable(json.loads(f.read_text())), indent=1) + "\n")
        elif f.name.startswith("events.out.tfevents"):
            keep_scalars(f, keep / f.name)
        else:
            continue
        kept.append(f.name)
    return kept


def keep_scalars(src: Path, dst: Path) -> None:
    """Copy a TensorBoard event file with only its scalars (the curves the report draws): the
    config text and hparams summaries hold the run's machine paths."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as out:
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
    os.replace(tmp, dst)


# A path through a checkout (any machine's, e.g. ~/hpc-imagenet or a GPU node's copy) up to one of its
# top-level folders; and any other absolute path.
_CHECKOUT_PATH = re.compile(r"(?<![\w.])/[^\s\"'=:]*?/(?=(?:imagenet|results|launch|slurm|tests|\.venv)/)")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s\"'=:/]+/)+(?=[^\s\"'=:/]+)")


def portable(value: object) -> object:
    """``value`` (JSON) with no absolute machine paths: a path inside a checkout becomes relative to
    it, any other absolute path keeps its last component (a data set's name)."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        return _ABSOLUTE_PATH.sub("", _CHECKOUT_PATH.sub("", value))
    return value


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def point_dict(p: TrainPoint) -> Dict[str, object]:
    d = asdict(p)
    d["extra_args"] = list(p.extra_args)
    d["world_size"] = p.world_size
    return d


def read_run_json(log_dir: Path) -> dict:
    path = log_dir / "run.json"
    if not path.exists():
        raise FileNotFoundError(f"the run wrote no {path}")
    return json.loads(path.read_text())


# ---------------------------------------------------------------- scaling efficiency

def group_key(point: Dict[str, object]) -> Tuple:
    return tuple(str(point.get(k)) for k in GROUP_KEYS)


def add_efficiency(records: List[dict]) -> None:
    """Set metrics.scaling_efficiency (and .baseline_world_size) in place.

    Efficiency = (X_n / n) / (X_0 / n_0) against the smallest world size of the same sweep and
    same other parameters, so a sweep of 2..8 processes is judged from 2, not from an absent 1.
    """
    ok = [r for r in records if r["kind"] == "train" and r["status"] == "ok"]
    groups: Dict[Tuple, List[dict]] = {}
    for r in ok:
        groups.setdefault((r["sweep"],) + group_key(r["point"]), []).append(r)
    for members in groups.values():
        base = min(members, key=lambda r: r["metrics"]["world_size"])
        b_rate = base["metrics"]["images_per_s"] / base["metrics"]["world_size"]
        for r in members:
            m = r["metrics"]
            m["scaling_efficiency"] = m["images_per_s"] / m["world_size"] / b_rate
            m["baseline_world_size"] = base["metrics"]["world_size"]
