"""Benchmark harness: ``python -m results.bench train|io|allreduce|overlap|pipeline|quick|scaling|faults ...``.

Each measured point appends one JSON record to ``results/records/<tag>.jsonl`` (see
:mod:`results.records`); a point that fails is recorded as failed with the reason, and the sweep
goes on. ``quick`` is the preset behind ``make bench``: a small but complete set of all three
kinds on a CPU machine in a few minutes, followed by the report. ``scaling`` sweeps node counts
(or, with ``--io``, storage readers) on the SLURM cluster that ``sbatch`` reaches
(:mod:`results.scaling`); ``faults`` runs the chaos tests on the SLURM test cluster
and records them (:mod:`results.faults_bench`).
"""
from __future__ import annotations

import argparse
import logging
import re
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from results import (allreduce_bench, data_scale_bench, faults_bench, io_bench, overlap_bench, records, scaling,
                     slurm_queue, train_bench)
from slurm.generate import GenerateError

log = logging.getLogger(__name__)

RESULTS = records.RESULTS_DIR
SCRATCH = RESULTS / "scratch"  # git-ignored: checkpoints, generated JPEGs
RUNS = RESULTS / "runs"  # kept: run.json + TensorBoard events behind the learning curves


class BenchError(RuntimeError):
    """Bad input; the message names the problem and the fix."""


def _environment(nodes: Optional[int] = None) -> dict:
    from imagenet import sysinfo
    return sysinfo.collect(nodes=nodes)


def _progress(i: int, n: int, what: str) -> None:
    log.info("[%d/%d] %s", i, n, what)


# ---------------------------------------------------------------- train

def train_points(a: argparse.Namespace) -> List[train_bench.TrainPoint]:
    """The sweep's product; smallest world size first so efficiencies have their baseline."""
    pts = [train_bench.TrainPoint(variant=v, procs_per_node=p, nodes=n, batch_size=b, precision=pr,
                                  amp_dtype=a.amp_dtype, data=d, arch=a.arch, image_size=a.image_size,
                                  epochs=a.epochs, steps_per_epoch=a.steps_per_epoch, val_steps=a.val_steps,
                                  workers=a.workers, extra_args=tuple(a.extra))
           for d in a.data for v in a.variants for pr in a.precision for b in a.batch
           for n in a.nodes for p in a.procs]
    if a.setups:  # each setup brings its own variant and precision: one point per setup, not a product
        pts = list({p.name: p for p in (train_bench.from_setup(p, s) for p in pts for s in a.setups)}.values())
    # smallest world size first, and the baseline setup first, so ratios and efficiencies have their base
    return sorted(pts, key=lambda p: (str(p.data), p.batch_size, p.world_size, p.setup != train_bench.BASELINE_SETUP,
                                      train_bench.group_key(train_bench.point_dict(p))))


def run_train(a: argparse.Namespace) -> List[dict]:
    pts = train_points(a)
    runner = (train_bench.SlurmRunner(a.gpus_per_node, a.time_limit, cpus_per_task=a.cpus_per_task,
                                      timeout_s=a.timeout, partition=a.partition, account=a.account, qos=a.qos,
                                      constraint=a.constraint, setup=tuple(a.setup)) if a.submit == "slurm"
              else train_bench.LocalRunner(a.timeout))
    sweep = records.new_sweep_id("train", a.tag)
    params = {p.arch: train_bench.parameter_count(p.arch) for p in pts}
    done: List[dict] = []
    for i, p in enumerate(pts, 1):
        _progress(i, len(pts), f"train {p.name} ({runner.name})")
        rec = _train_point(p, runner, sweep, params[p.arch], a)
        done.append(rec)
        train_bench.add_efficiency(done)  # the baseline ran first: this point's efficiency is final
        records.append(a.records, rec)
        _say_train(rec)
    return done


def _train_point(p: train_bench.TrainPoint, runner, sweep: str, params: Optional[int],
                 a: argparse.Namespace) -> dict:
    scratch = SCRATCH / sweep / p.name
    extra = {"runner": runner.name, "bench_command": " ".join(sys.argv), **({"note": a.note} if a.note else {})}
    why = train_bench.check(p)
    if why:
        return failed_train_record(p, sweep, why, extra)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        out = runner.run(p, scratch)
    except Exception as e:  # the runner could not even start: record why and go on
        return failed_train_record(p, sweep, str(e), extra)
    return train_record(p, out, sweep, params, extra, scratch, RUNS / sweep / p.name, a.keep_checkpoints)


def failed_train_record(p: train_bench.TrainPoint, sweep: str, error: str, extra: dict) -> dict:
    return records.make_record("train", sweep, train_bench.point_dict(p), {}, _environment(p.nodes), "failed",
                               error, **extra)


def train_record(p: train_bench.TrainPoint, out: train_bench.Outcome, sweep: str, params: Optional[int],
                 extra: dict, scratch: Path, keep: Path, keep_checkpoints: bool = False) -> dict:
    """The record of a point that ran (well or not), from the run.json it left in ``scratch``;
    what the report reads is kept in ``keep``."""
    extra = {**extra, "command": train_bench.portable(out.command), "wall_s": out.wall_s}
    try:
        run = train_bench.read_run_json(scratch)
        metrics = train_bench.metrics_from_run(run)
    except (OSError, ValueError, KeyError) as e:
        error = f"exit code {out.returncode}; {type(e).__name__}: {e}; log tail: {_last_line(out.log_tail)}"
        return failed_train_record(p, sweep, error, extra)
    metrics["parameters"] = params
    if run.get("profile"):  # --profile-steps: where the step's device time went, kernel by kernel
        extra["profile"] = train_bench.portable(run["profile"])
    extra["run_dir"] = _repo_relative(keep)
    extra["kept_files"] = train_bench.keep_artifacts(scratch, keep)
    if not keep_checkpoints:
        shutil.rmtree(scratch, ignore_errors=True)
    status, error = "ok", None
    if out.returncode != 0 or run.get("status") != "finished":
        status, error = "failed", f"exit code {out.returncode}, engine status {run.get('status')}: " \
                                  f"{_last_line(out.log_tail)}"
    return records.make_record("train", sweep, train_bench.point_dict(p), metrics,
                               train_bench.portable(run.get("environment") or _environment()), status, error,
                               **extra)


def _repo_relative(path: Path) -> str:
    """Relative to the checkout when inside it, so a clone finds the committed events."""
    try:
        return str(path.resolve().relative_to(RESULTS.parent))
    except ValueError:
        return str(path)


def _last_line(text: str) -> str:
    """The line of a failed run's log that says why: the engine's one-line ``error:``, else the last
    exception line of the worker's traceback. torchrun's own footer (ChildFailedError, a link to
    errors.html) comes after both and names no cause, so it is passed over."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    footer = next((i for i, ln in enumerate(lines) if "ChildFailedError" in ln or ln.startswith("=====")), len(lines))
    cause = lines[:footer]
    engine = [ln for ln in cause if re.match(r"^(\[\w+\]:\s*)?error:", ln)]
    exceptions = [ln for ln in cause if re.match(r"^(\[\w+\]:\s*)?[\w.]*(Error|Exception|Interrupt)\b", ln)]
    errs = [ln for ln in cause if "Error" in ln or "error" in ln]
    return (engine or exceptions or errs or lines or ["(no output)"])[-1][:300]


def _say_train(rec: dict) -> None:
    m = rec["metrics"]
    if rec["status"] == "ok":
        log.info("    %.1f images/s (%d processes), %.1f ms/step, efficiency %.2f", m["images_per_s"],
                 m["world_size"], m["step_time_ms"], m.get("scaling_efficiency", float("nan")))
    else:
        log.warning("    FAILED: %s", rec["error"])


# ---------------------------------------------------------------- io

def _jpeg_root(data: Optional[str], classes: int, per_class: int) -> Path:
    """--data as given (it must hold train/), else the generated ImageNet-like JPEGs, written if missing."""
    if data:
        if not (Path(data) / "train").is_dir():
            raise BenchError(f"{Path(data)}/train does not exist; pass an ImageFolder dataset root or omit --data")
        return Path(data)
    from results import jpegs
    jpegs.ensure_dataset(SCRATCH / "jpegs", classes=classes, train_per_class=per_class)
    return SCRATCH / "jpegs"


def run_io(a: argparse.Namespace) -> List[dict]:
    root = _jpeg_root(a.data, a.classes, a.per_class)
    backends = io_bench.available_backends()
    names = a.backends or list(backends)
    unknown = [n for n in names if n not in backends]
    if unknown:
        raise BenchError(f"unknown io backend(s) {unknown}; available: {', '.join(backends)}")
    pts = io_bench.points(names, a.workers, a.readers, a.cache, a.batch, a.image_size, a.images,
                          a.reader_workers, a.threads)
    sweep, env, out = records.new_sweep_id("io", a.tag), _environment(), []
    probe = backends["torchvision"](root, a.image_size)  # always there; same files, same order
    files = io_bench.dataset_files(probe)
    order = io_bench.shuffled_order(len(files))
    for i, p in enumerate(pts, 1):
        _progress(i, len(pts), f"io {p}")
        out.append(_io_point(p, backends[p.backend], root, order, files, sweep, env))
        records.append(a.records, out[-1])
    return out


def _io_point(p: io_bench.IOPoint, builder, root: Path, order, files, sweep: str, env: dict) -> dict:
    point = {**io_bench.point_dict(p), "data": str(root), "dataset_images": len(files)}
    try:
        m = io_bench.measure(builder, root, p, order, files)
    except Exception as e:
        log.warning("    FAILED: %s", e)
        return records.make_record("io", sweep, point, {}, env, "failed", f"{type(e).__name__}: {e}")
    log.info("    %.1f images/s, %.1f MB/s, storage reads %.1f MB/s", m["images_per_s"], m["mb_per_s"],
             m.get("storage_mb_per_s", float("nan")))
    return records.make_record("io", sweep, point, m, env)


# ---------------------------------------------------------------- allreduce

def run_allreduce(a: argparse.Namespace) -> List[dict]:
    backend = a.backend or allreduce_bench.default_backend()
    msg_sizes = allreduce_bench.sizes(a.min_bytes, a.max_bytes, a.factor)
    sweep, env, out = records.new_sweep_id("allreduce", a.tag), _environment(), []
    for i, n in enumerate(a.world_sizes, 1):
        _progress(i, len(a.world_sizes), f"allreduce {backend}, {n} processes, {len(msg_sizes)} sizes")
        try:
            rows = allreduce_bench.run_local(n, msg_sizes, backend)
        except Exception as e:
            rows = [{"bytes": s, "world_size": n, "error": str(e)} for s in msg_sizes]
        for row in rows:
            point = {"backend": backend, "world_size": n, "bytes": row["bytes"], "transport": "local"}
            if "error" in row:
                rec = records.make_record("allreduce", sweep, point, {}, env, "failed", row["error"])
            else:
                rec = records.make_record("allreduce", sweep, point, row, env)
            records.append(a.records, rec)
            out.append(rec)
    return out


def run_overlap(a: argparse.Namespace) -> List[dict]:
    sweep, env, out = records.new_sweep_id("overlap", a.tag), _environment(), []
    points = [(n, mb) for n in a.world_sizes for mb in a.bucket_cap_mb]
    for i, (n, mb) in enumerate(points, 1):
        _progress(i, len(points), f"overlap {a.arch}, {n} processes, buckets {mb:g} MB")
        point = {"backend": "gloo", "world_size": n, "arch": a.arch, "batch_size": a.batch,
                 "image_size": a.image_size, "bucket_cap_mb": mb}
        try:
            m = overlap_bench.run_local(n, a.arch, a.batch, a.image_size, a.steps, mb)
            rec = records.make_record("overlap", sweep, point, m, env)
        except Exception as e:  # a failed point is recorded with why, and the sweep goes on
            rec = records.make_record("overlap", sweep, point, {}, env, "failed", _last_line(str(e)))
        records.append(a.records, rec)
        out.append(rec)
    return out


def run_pipeline(a: argparse.Namespace) -> List[dict]:
    """Steady-state decode cost per backend (results.pipeline_bench): backends in lockstep,
    batch by batch, timed by the thread's CPU clock (workers 0) or after a first pass that starts the
    workers; the ratio is the median over rounds of per-round ratios to the baseline backend."""
    from results import pipeline_bench as pipelines
    root = _jpeg_root(a.data, 4, -(-a.images // 4))
    samples = pipelines.bench_samples(str(root), a.images)
    sweep, env, out = records.new_sweep_id("pipeline", a.tag), _environment(), []
    _progress(1, 1, f"pipeline {', '.join(a.backends)}: {len(samples)} images, workers {a.workers}, "
                    f"{a.rounds} round(s)")
    results = pipelines.bench(samples, a.backends, a.workers, a.image_size, a.batch, a.rounds)
    for row in pipelines.summarize(results):
        point = {"backend": row["backend"], "split": row["split"], "workers": row["workers"],
                 "image_size": a.image_size, "batch_size": a.batch, "images": len(samples), "data": str(root)}
        ratio, span = row["ratio_per_core_vs_baseline"], row["ratio_range"] or [None, None]
        m = {"images_per_cpu_s": row["images_per_s_per_core"], "images_per_s": row["images_per_s_wall"],
             "cpu_ms_per_image": row["cpu_ms_per_image"], "rounds": row["rounds"], "ratio_per_core": ratio,
             "ratio_min": span[0], "ratio_max": span[1]}
        out.append(records.make_record("pipeline", sweep, point, m, env))
        records.append(a.records, out[-1])
        log.info("    %-8s %-5s workers=%d  %.0f images/s per core%s", row["backend"], row["split"],
                 row["workers"], row["images_per_s_per_core"], f", {ratio:.2f}x baseline" if ratio else "")
    return out


# ---------------------------------------------------------------- quick preset

QUICK_DEMO = SCRATCH / "demo"


def run_quick(a: argparse.Namespace) -> int:
    """Everything ``make bench`` measures on a 2-core CPU machine, then the report."""
    t0 = time.monotonic()
    if a.fresh:
        _forget(a.tag, a.records)
    common = ["--tag", a.tag, "--records", str(a.records)]
    setups = ["--setups", *train_bench.CPU_SETUPS, "--procs", "1", "--batch", "16", "--image-size", "64",
              # the JPEG set holds 8 batches: 6 epochs of 8 give 36 measured steps (2 warm-up steps an epoch)
              "--epochs", "6", "--steps-per-epoch", "8", "--val-steps", "1"]
    steps = [
        ["allreduce", "--world-sizes", "2", "--max-bytes", str(16 << 20), *common],
        ["overlap", "--world-sizes", "2", "--bucket-cap-mb", "1", "25", *common],
        ["io", "--classes", "4", "--per-class", "32", "--images", "128", "--workers", "0", "2",
         "--readers", "2", "--batch", "16", *common],
        # the pipelines' steady-state cost per image on the same files (the io points include start-up)
        ["pipeline", "--images", "128", "--workers", "0", "2", "--rounds", "3", *common],
        # the step against the pytorch/examples-style baseline, on synthetic data and on the io step's JPEGs
        ["train", *setups, "--data", "dummy", str(SCRATCH / "jpegs"), *common],
        ["train", "--procs", "1", "2", "--batch", "16", "--epochs", "1", "--steps-per-epoch", "30",
         "--val-steps", "1", *common],
        ["train", "--data", str(_demo_data()), "--procs", "1", "2", "--batch", "16", "--epochs", "4",
         "--steps-per-epoch", "8", "--val-steps", "4", "--extra=--seed=0", *common],
    ]
    for i, argv in enumerate(steps, 1):
        _progress(i, len(steps) + 1, f"quick: bench {argv[0]}")
        main(argv)
    _progress(len(steps) + 1, len(steps) + 1, "quick: report")
    from results import report
    rc = report.main([])
    log.info("quick preset done in %.0f s", time.monotonic() - t0)
    return rc


def _demo_data() -> Path:
    """The engine's demo ImageFolder (10 classes of 64x64 shapes), generated once."""
    if not (QUICK_DEMO / "train").is_dir():
        from imagenet import demo_data
        demo_data.main([str(QUICK_DEMO), "--classes", "10", "--train-per-class", "32", "--val-per-class", "8"])
    return QUICK_DEMO


def _forget(tag: str, path: Path) -> None:
    """--fresh: drop this tag's records file and kept runs, so the report shows one run."""
    if path.exists():
        path.unlink()
    for d in RUNS.glob(f"{tag}-*"):
        shutil.rmtree(d)


# ---------------------------------------------------------------- command line

def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; use bytes or a K/M/G suffix, e.g. 64M") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m results.bench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    # no default here: parents share their action objects, so a subparser's set_defaults(tag=...)
    # would change every command's default; main() picks it per command (DEFAULT_TAGS)
    common.add_argument("--tag", help="name of this machine/run set; records go to results/records/<tag>.jsonl "
                        "and sweep ids start with it (default: local; quick: quick; scaling: scaling)")
    common.add_argument("--records", type=Path, help="records file (default results/records/<tag>.jsonl)")
    common.add_argument("-v", "--verbose", action="store_true")

    t = sub.add_parser("train", parents=[common], help="training throughput sweep (runs the engine)")
    t.add_argument("--variants", nargs="+", default=["ddp"], choices=list(train_bench.SCRIPTS))
    t.add_argument("--procs", nargs="+", type=int, default=[1, 2], help="processes (GPUs) per node")
    t.add_argument("--nodes", nargs="+", type=int, default=[1])
    t.add_argument("--batch", nargs="+", type=int, default=[16], help="batch per process")
    t.add_argument("--precision", nargs="+", default=["O0"], choices=["O0", "O1", "O2", "O3"])
    t.add_argument("--setups", nargs="+", choices=list(train_bench.SETUPS),
                   help="named step configurations instead of --variants x --precision, compared with the "
                        "pytorch/examples-style 'baseline' at the same batch and data: "
                        + "; ".join(f"{k}: {v.about}" for k, v in train_bench.SETUPS.items()))
    t.add_argument("--amp-dtype", choices=["float16", "bfloat16"])
    t.add_argument("--data", nargs="+", default=["dummy"], help="'dummy' and/or dataset directories")
    t.add_argument("-a", "--arch", default="resnet18")
    t.add_argument("--image-size", type=int, default=64)
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--steps-per-epoch", type=int, default=30)
    t.add_argument("--val-steps", type=int, default=1)
    t.add_argument("--workers", type=int, default=0)
    t.add_argument("--extra", action="append", default=[], help="one more engine flag (repeatable), "
                   "e.g. --extra=--channels-last")
    t.add_argument("--submit", choices=["local", "slurm"], default="local",
                   help="local: torchrun here; slurm: one sbatch job per point (slurm.generate)")
    t.add_argument("--gpus-per-node", type=int, default=4, help="with --submit slurm (0: CPU nodes)")
    t.add_argument("--cpus-per-task", type=int, help="with --submit slurm; also each process's OMP_NUM_THREADS")
    t.add_argument("--time-limit", default="01:00:00", help="with --submit slurm")
    for flag in ("--partition", "--account", "--qos", "--constraint"):
        t.add_argument(flag, help=f"with --submit slurm: sbatch {flag}")
    t.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="with --submit slurm: shell line the job runs first, e.g. 'module load cuda' (repeatable)")
    t.add_argument("--timeout", type=float, default=1800, help="seconds per point (slurm: then the job is "
                   "cancelled)")
    t.add_argument("--keep-checkpoints", action="store_true", help="keep results/scratch run folders")
    t.add_argument("--note", help="recorded with every point and shown in the report (e.g. what the nodes share)")

    i = sub.add_parser("io", parents=[common], help="data-loading throughput (no model)")
    i.add_argument("--data", help="ImageFolder root with train/ (default: generated ImageNet-like JPEGs)")
    i.add_argument("--classes", type=int, default=4, help="generated dataset: classes")
    i.add_argument("--per-class", type=int, default=64, help="generated dataset: images per class")
    i.add_argument("--backends", nargs="+", help="loader backends (default: all available)")
    i.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2])
    i.add_argument("--readers", nargs="+", type=int, default=[1, 2], help="concurrent reader processes")
    i.add_argument("--reader-workers", type=int, default=0, help="loader workers of each concurrent reader")
    i.add_argument("--cache", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    i.add_argument("--batch", type=int, default=32)
    i.add_argument("--image-size", type=int, default=224)
    i.add_argument("--images", type=int, default=256, help="images read per reader and point")
    i.add_argument("--threads", type=int, default=1, help="torch threads of a reader (as a loader worker)")

    r = sub.add_parser("allreduce", parents=[common], help="collective bandwidth (nccl-tests style)")
    r.add_argument("--world-sizes", nargs="+", type=int, default=[2])
    r.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl with CUDA, else gloo")
    r.add_argument("--min-bytes", type=_size, default=4)
    r.add_argument("--max-bytes", type=_size, default=64 << 20)
    r.add_argument("--factor", type=int, default=4)

    o = sub.add_parser("overlap", parents=[common], help="exposed DDP all-reduce time per step (gloo, this host)")
    o.add_argument("--world-sizes", nargs="+", type=int, default=[2])
    o.add_argument("--arch", default="resnet18")
    o.add_argument("--batch", type=int, default=16)
    o.add_argument("--image-size", type=int, default=64)
    o.add_argument("--steps", type=int, default=10, help="timed steps of each kind (interleaved)")
    o.add_argument("--bucket-cap-mb", type=float, nargs="+", default=[25.0])

    pl = sub.add_parser("pipeline", parents=[common], help="steady-state decode cost per image of each backend "
                        "(lockstep rounds; ratio to the baseline backend)")
    pl.add_argument("--data", help="ImageFolder root with train/ (default: the generated ImageNet-like JPEGs)")
    pl.add_argument("--images", type=int, default=256, help="images per pass")
    pl.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    pl.add_argument("--backends", nargs="+", default=["baseline", "fast"])
    pl.add_argument("--rounds", type=int, default=3)
    pl.add_argument("--image-size", type=int, default=224)
    pl.add_argument("--batch", type=int, default=32)

    q = sub.add_parser("quick", parents=[common], help="the make-bench preset: all kinds, small, then report")
    q.add_argument("--fresh", action="store_true", help="replace this tag's earlier records and runs")
    scaling.add_parser(sub, common)
    data_scale_bench.add_parser(sub, common)
    faults_bench.add_parser(sub, common)
    return p


DEFAULT_TAGS = {"quick": "quick", "scaling": "scaling", "faults": "faults"}


def resolve_tag(a: argparse.Namespace) -> None:
    """The command's default tag and records file where none were given."""
    a.tag = a.tag or DEFAULT_TAGS.get(a.cmd, "local")
    a.records = a.records or records.RECORDS_DIR / f"{a.tag}.jsonl"


def _values(a: argparse.Namespace, name: str) -> List[int]:
    v = getattr(a, name, None)
    return [] if v is None else v if isinstance(v, list) else [v]


def _validate(a: argparse.Namespace) -> None:
    """Counts that cannot work, as one line naming the flag."""
    for name, low in (("procs", 1), ("nodes", 1), ("batch", 1), ("readers", 1), ("images", 1),
                      ("workers", 0), ("reader_workers", 0), ("threads", 1), ("world_sizes", 2), ("rounds", 1)):
        bad = [v for v in _values(a, name) if v < low]
        if bad:
            raise BenchError(f"--{name.replace('_', '-')} {bad[0]} is not allowed; use values >= {low}"
                             + (" (the bus bandwidth of one process is 0)" if name == "world_sizes" else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO, format="%(message)s")
    resolve_tag(a)
    try:
        _validate(a)
        if a.cmd == "quick":
            return run_quick(a)
        if a.cmd == "scaling":
            return scaling.run(a)
        if a.cmd == "faults":
            return faults_bench.run(a)
        out = {"train": run_train, "io": run_io, "allreduce": run_allreduce, "overlap": run_overlap,
               "pipeline": run_pipeline, "shards": data_scale_bench.run}[a.cmd](a)
    except (BenchError, slurm_queue.SlurmError, GenerateError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = sum(r["status"] != "ok" for r in out)
    log.info("%d point(s) recorded in %s, %d failed", len(out), a.records, failed)
    return 1 if failed == len(out) and out else 0


if __name__ == "__main__":
    sys.exit(main())
