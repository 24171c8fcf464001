"""The bench kinds that run on this machine: ``train`` (also ``--submit slurm``, one job per point),
``io``, ``allreduce``, ``overlap`` and ``pipeline``. Each measured point appends one record; a point
that fails is recorded as failed with the reason, and the sweep goes on."""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import List, Optional

from results.analysis.efficiency import add_efficiency
from results.analysis.parameters import parameter_count
from results.core import records
from results.core.records import RUNS_DIR, SCRATCH_DIR
from results.core.setups import BASELINE_SETUP, group_key
from results.runners import allreduce_bench, common, io_bench, overlap_bench, pipeline_bench as pipelines, train_bench

log = logging.getLogger(__name__)


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
    return sorted(pts, key=lambda p: (str(p.data), p.batch_size, p.world_size, p.setup != BASELINE_SETUP,
                                      group_key(train_bench.point_dict(p))))


def run_train(a: argparse.Namespace) -> List[dict]:
    pts = train_points(a)
    runner = (train_bench.SlurmRunner(a.gpus_per_node, a.time_limit, cpus_per_task=a.cpus_per_task,
                                      timeout_s=a.timeout, partition=a.partition, account=a.account, qos=a.qos,
                                      constraint=a.constraint, setup=tuple(a.setup)) if a.submit == "slurm"
              else train_bench.LocalRunner(a.timeout))
    sweep = records.new_sweep_id("train", a.tag)
    params = {p.arch: parameter_count(p.arch) for p in pts}
    done: List[dict] = []
    for i, p in enumerate(pts, 1):
        common.progress(i, len(pts), f"train {p.name} ({runner.name})")
        rec = _train_point(p, runner, sweep, params[p.arch], a)
        done.append(rec)
        add_efficiency(done)  # the baseline ran first: this point's efficiency is final
        records.append(a.records, rec)
        _say_train(rec)
    return done


def _train_point(p: train_bench.TrainPoint, runner, sweep: str, params: Optional[int],
                 a: argparse.Namespace) -> dict:
    scratch = SCRATCH_DIR / sweep / p.name
    extra = {"runner": runner.name, "bench_command": " ".join(sys.argv),
             **({"note": a.note} if a.note else {})}
    why = train_bench.check(p)
    if why:
        return train_bench.failed_train_record(p, sweep, why, extra)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        out = runner.run(p, scratch)
    except Exception as e:  # the runner could not even start: record why and go on
        return train_bench.failed_train_record(p, sweep, str(e), extra)
    return train_bench.train_record(p, out, sweep, params, extra, scratch, RUNS_DIR / sweep / p.name,
                                    a.keep_checkpoints)


def _say_train(rec: dict) -> None:
    m = rec["metrics"]
    if rec["status"] == "ok":
        log.info("    %.1f images/s (%d processes), %.1f ms/step, efficiency %.2f", m["images_per_s"],
                 m["world_size"], m["step_time_ms"], m.get("scaling_efficiency", float("nan")))
    else:
        log.warning("    FAILED: %s", rec["error"])


# ---------------------------------------------------------------- io

def run_io(a: argparse.Namespace) -> List[dict]:
    root = common.jpeg_root(a.data, a.classes, a.per_class)
    backends = io_bench.available_backends()
    names = a.backends or list(backends)
    unknown = [n for n in names if n not in backends]
    if unknown:
        raise common.BenchError(f"unknown io backend(s) {unknown}; available: {', '.join(backends)}")
    pts = io_bench.points(names, a.workers, a.readers, a.cache, a.batch, a.image_size, a.images,
                          a.reader_workers, a.threads)
    sweep, env, out = records.new_sweep_id("io", a.tag), common.environment(), []
    probe = backends["torchvision"](root, a.image_size)  # always there; same files, same order
    files = io_bench.dataset_files(probe)
    order = io_bench.shuffled_order(len(files))
    for i, p in enumerate(pts, 1):
        common.progress(i, len(pts), f"io {p}")
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
    sweep, env, out = records.new_sweep_id("allreduce", a.tag), common.environment(), []
    for i, n in enumerate(a.world_sizes, 1):
        common.progress(i, len(a.world_sizes), f"allreduce {backend}, {n} processes, {len(msg_sizes)} sizes")
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
    sweep, env, out = records.new_sweep_id("overlap", a.tag), common.environment(), []
    points = [(n, mb) for n in a.world_sizes for mb in a.bucket_cap_mb]
    for i, (n, mb) in enumerate(points, 1):
        common.progress(i, len(points), f"overlap {a.arch}, {n} processes, buckets {mb:g} MB")
        point = {"backend": "gloo", "world_size": n, "arch": a.arch, "batch_size": a.batch,
                 "image_size": a.image_size, "bucket_cap_mb": mb}
        try:
            m = overlap_bench.run_local(n, a.arch, a.batch, a.image_size, a.steps, mb)
            rec = records.make_record("overlap", sweep, point, m, env)
        except Exception as e:  # a failed point is recorded with why, and the sweep goes on
            rec = records.make_record("overlap", sweep, point, {}, env, "failed", common.last_line(str(e)))
        records.append(a.records, rec)
        out.append(rec)
    return out


def run_pipeline(a: argparse.Namespace) -> List[dict]:
    """Steady-state decode cost per backend (results.runners.pipeline_bench): backends in lockstep,
    batch by batch, timed by the thread's CPU clock (workers 0) or after a first pass that starts the
    workers; the ratio is the median over rounds of per-round ratios to the baseline backend."""
    root = common.jpeg_root(a.data, 4, -(-a.images // 4))
    samples = pipelines.bench_samples(str(root), a.images)
    sweep, env, out = records.new_sweep_id("pipeline", a.tag), common.environment(), []
    common.progress(1, 1, f"pipeline {', '.join(a.backends)}: {len(samples)} images, workers {a.workers}, "
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
