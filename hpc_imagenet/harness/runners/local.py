"""The bench kinds that run on this machine: ``train`` (also ``--submit slurm``, one job per point),
``io``, ``allreduce`` and ``pipeline``. Each measured point appends one record; a point
that fails is recorded as failed with the reason, and the sweep goes on."""
from __future__ import annotations

import argparse
import logging
import shutil
from dataclasses import asdict
from typing import List, Optional

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.imagenet.data.decode.augment import Augmentation
from hpc_imagenet.harness.analysis.efficiency import with_efficiency
from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import from_dict
from hpc_imagenet.harness.core.records import RUNS_DIR, SCRATCH_DIR
from hpc_imagenet.harness.core.setups import BASELINE_SETUP, group_key
from hpc_imagenet.harness.runners import allreduce_bench, common, io_bench, train_bench
from hpc_imagenet.harness.runners import pipeline_bench as pipelines
from hpc_imagenet.harness.runners.procs import run_ranks

log = logging.getLogger(__name__)


def train_points(args: argparse.Namespace) -> List[train_bench.TrainPoint]:
    """The sweep's product; smallest world size first so efficiencies have their baseline."""
    pts = [train_bench.TrainPoint(variant=v, procs_per_node=p, nodes=n, batch_size=b, precision=pr,
                                  amp_dtype=args.amp_dtype, data=d, arch=args.arch, image_size=args.image_size,
                                  epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, val_steps=args.val_steps,
                                  workers=args.workers, extra_args=tuple(args.extra))
           for d in args.data for v in args.variants for pr in args.precision for b in args.batch
           for n in args.nodes for p in args.procs]
    if args.setups:  # each setup brings its own variant and precision: one point per setup, not a product
        pts = list({p.name: p for p in (train_bench.from_setup(p, s) for p in pts for s in args.setups)}.values())
    # smallest world size first, and the baseline setup first, so ratios and efficiencies have their base
    return sorted(pts, key=lambda p: (str(p.data), p.batch_size, p.world_size, p.setup != BASELINE_SETUP,
                                      group_key(p)))


def run_train(args: argparse.Namespace) -> List[dict]:
    pts = train_points(args)
    runner = (train_bench.SlurmRunner.from_args(args, args.time_limit, args.timeout) if args.submit == "slurm"
              else train_bench.LocalRunner(args.timeout))
    sweep = records.new_sweep_id("train", args.tag)
    params = {p.arch: parameter_count(p.arch) for p in pts}
    done: List[dict] = []
    others = cputime.OtherWork()  # a local point's processes are this one's children; a SLURM job's are not
    for i, p in enumerate(pts, 1):
        common.progress(i, len(pts), f"train {p.name} ({runner.name})")
        others.mark()
        rec = _train_point(p, runner, sweep, params[p.arch], args)
        rec["other_cpu_share"] = others.share() if args.submit == "local" else None
        done.append(rec)
        # the newest point's scaling efficiency, in its record: the baseline ran first, so it is final
        m = with_efficiency([from_dict(r) for r in done])[-1].metrics
        if m.scaling_efficiency is not None:
            records.add_metrics(rec, scaling_efficiency=m.scaling_efficiency, baseline_world_size=m.baseline_world_size)
        records.append(args.records, rec)
        r = from_dict(rec)
        if r.ok:
            log.info("    %.1f images/s (%d processes), %.1f ms/step, efficiency %.2f", r.metrics.images_per_s,
                     r.world_size, r.metrics.step_time_ms, r.metrics.scaling_efficiency or float("nan"))
        else:
            log.warning("    FAILED: %s", r.error)
    return done


def _train_point(point: train_bench.TrainPoint, runner, sweep: str, params: Optional[int],
                 args: argparse.Namespace) -> dict:
    scratch = SCRATCH_DIR / sweep / point.name
    extra = common.record_context(args, runner.name)
    why = train_bench.check(point)
    if why:
        return train_bench.failed_train_record(point, sweep, why, extra)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        out = runner.run(point, scratch)
    except Exception as e:  # the runner could not even start: record why and go on
        return train_bench.failed_train_record(point, sweep, str(e), extra)
    return train_bench.train_record(point, out, sweep, params, extra, scratch, RUNS_DIR / sweep / point.name,
                                    args.keep_checkpoints)


# ---------------------------------------------------------------- io

def run_io(args: argparse.Namespace) -> List[dict]:
    root = common.jpeg_root(args.data, args.classes, args.per_class)
    backends = io_bench.available_backends()
    names = args.backends or list(backends)
    unknown = [n for n in names if n not in backends]
    if unknown:
        raise common.BenchError(f"unknown io backend(s) {unknown}; available: {', '.join(backends)}")
    pts = io_bench.points(names, args.workers, args.readers, args.cache, args.batch, args.image_size, args.images,
                          args.reader_workers, args.threads)
    sweep = common.new_sweep("io", args)
    probe = backends["torchvision"](root, args.image_size)  # always there; same files, same order
    files = io_bench.dataset_files(probe)
    order = io_bench.shuffled_order(len(files))
    for i, p in enumerate(pts, 1):
        common.progress(i, len(pts), f"io {p}")
        point = {**asdict(p), "data": str(root), "dataset_images": len(files)}
        try:
            m = io_bench.measure(backends[p.backend], root, p, order, files)
        except Exception as e:
            log.warning("    FAILED: %s", e)
            sweep.add(point, {}, "failed", f"{type(e).__name__}: {e}")
            continue
        log.info("    %.1f images/s, %.1f MB/s, storage reads %.1f MB/s", m["images_per_s"], m["mb_per_s"],
                 m.get("storage_mb_per_s", float("nan")))
        sweep.add(point, m)
    return sweep.done


# ---------------------------------------------------------------- allreduce

def run_allreduce(args: argparse.Namespace) -> List[dict]:
    backend = args.backend or allreduce_bench.default_backend()
    msg_sizes = allreduce_bench.sizes(args.min_bytes, args.max_bytes, args.factor)
    sweep = common.new_sweep("allreduce", args)
    for i, n in enumerate(args.world_sizes, 1):
        common.progress(i, len(args.world_sizes), f"allreduce {backend}, {n} processes, {len(msg_sizes)} sizes")
        try:
            rows, error = run_ranks(n, allreduce_bench.sweep_in_group, (msg_sizes,), backend), None
        except Exception as e:
            rows, error = [{"bytes": s} for s in msg_sizes], str(e)
        for row in rows:
            sweep.add({"backend": backend, "world_size": n, "bytes": row["bytes"], "transport": "local"},
                      {} if error else row, "failed" if error else "ok", error)
    return sweep.done


def run_pipeline(args: argparse.Namespace) -> List[dict]:
    """Steady-state decode cost per backend (hpc_imagenet.harness.runners.pipeline_bench): backends in lockstep,
    batch by batch, timed by the thread's CPU clock (workers 0) or after a first pass that starts the
    workers; the ratio is the median over rounds of per-round ratios to the baseline backend."""
    root = common.jpeg_root(args.data, 4, -(-args.images // 4))
    samples = pipelines.bench_samples(str(root), args.images)
    sweep = common.new_sweep("pipeline", args)
    common.progress(1, 1, f"pipeline {', '.join(args.backends)}: {len(samples)} images, workers {args.workers}, "
                    f"{args.rounds} round(s)")
    augment = Augmentation(policy=args.auto_augment)
    results = pipelines.bench(samples, args.backends, args.workers, args.image_size, args.batch, args.rounds, augment)
    policy = {"auto_augment": args.auto_augment} if args.auto_augment else {}  # older records: no policy
    for row in pipelines.record(sweep, results, "backend", image_size=args.image_size, batch_size=args.batch,
                                images=len(samples), data=str(root), **policy):
        ratio = row["ratio_per_core"]
        log.info("    %-8s %-5s workers=%d  %.0f images/s per core%s", row["backend"], row["split"],
                 row["workers"], row["images_per_cpu_s"], f", {ratio:.2f}x baseline" if ratio else "")
    return sweep.done
