"""``python -m hpc_imagenet.harness.bench scaling``: a node-count sweep on the SLURM cluster you are logged in to.

    python -m hpc_imagenet.harness.bench scaling --nodes 1 2 4 8 --gpus-per-node 4 --partition gpu \\
        --setup 'module load cuda' --setup 'source ~/venvs/imagenet/bin/activate' \\
        -a resnet50 --batch 256 --image-size 224 --data /shared/imagenet --tag mycluster

Each point is one batch job written by :mod:`hpc_imagenet.slurm.generate` (the templates of the committed
``slurm/*.sh``), submitted with ``sbatch`` to whatever cluster it reaches (``SLURM_CONF`` or the
site config). By default each job waits for the previous one (``--dependency=afterany``), so
points never share nodes or storage; ``--concurrent`` drops that. Progress is printed per point
(queued, running, done); each finished job's run.json is read from the shared filesystem into
one record. Ctrl-C or ``--timeout`` cancels every job still queued or running. Running again with
the same ``--tag`` resumes: points with an ok record in the same sweep are skipped. ``--io``
sweeps readers x nodes over ``--data`` instead (:func:`storage_points`, the jobs run
:mod:`hpc_imagenet.harness.runners.storage_bench`). ``hpc_imagenet.harness.bench`` writes the report when the sweep is
done.

The scratch and kept run folders go under ``results/`` when the records file is the default one,
else next to the records file; either way they must be on a filesystem the nodes share.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import from_dict
from hpc_imagenet.harness.core.records import RUNS_DIR, SCRATCH_DIR, portable
from hpc_imagenet.harness.runners import script_points, storage_bench, train_bench
from hpc_imagenet.harness.runners.common import BenchError, add_flags, environment, record_context
from hpc_imagenet.slurm import client as slurm_client
from hpc_imagenet.slurm import generate

log = logging.getLogger(__name__)

DEFAULT_NODES = (1, 2, 4)


@dataclass
class Point:
    """One job of the sweep: its label, where it works, its job file and, once submitted, its id."""

    label: str
    scratch: Path
    script: str
    finish: Callable[["Point"], dict]
    job: Optional[str] = None
    error: Optional[str] = None  # why it could not be submitted
    t0: float = field(default_factory=time.monotonic)


# ---------------------------------------------------------------- the sweep

def run(args: argparse.Namespace) -> int:
    beside = Path(args.records).resolve().parent  # a records file outside results/records/ has them beside it
    default = beside == records.RECORDS_DIR.resolve()
    scratch_root, runs_root = (SCRATCH_DIR, RUNS_DIR) if default else (beside / "scratch", beside / "runs")
    kind = "storage" if args.io else "train"
    sweep, done = (records.new_sweep_id(kind, args.tag), {}) if args.fresh else \
        resume(args.records, kind, same_sweep_key(args), args.tag)
    make = storage_points if args.io else script_train_points if args.script else train_points
    points = make(args, sweep, done, scratch_root, runs_root)
    if args.dry_run:
        for p in points:
            print(f"# ---- {p.label}: {p.scratch / 'job.sh'}\n{p.script}")
        return 0
    if not points:
        log.info("every point of sweep %s is already recorded in %s", sweep, args.records)
        return 0
    log.info("sweep %s: %d point(s) to run%s, records -> %s", sweep, len(points),
             f" ({len(done)} already recorded)" if done else "", args.records)
    try:
        failed = submit_and_collect(points, args)
    except KeyboardInterrupt:
        log.warning("interrupted: every job of the sweep still queued or running was cancelled; rerun the "
                    "same command to resume")
        return 130
    except slurm_client.Timeout as e:
        log.warning("--timeout: %s, so they were cancelled; rerun the same command to resume", e)
        return 124
    return 1 if failed == len(points) else 0


def same_sweep_key(args: argparse.Namespace) -> dict:
    """What must match for an earlier record to belong to this sweep (everything but the node count)."""
    keys = ["io", "gpus_per_node", "cpus_per_task", "arch", "batch", "image_size", "steps_per_epoch", "data",
            "workers", "variant", "precision", "readers", "seconds", "format_label", "cache"]
    if getattr(args, "script", None):  # only then: an engine sweep's key stays what its earlier records hold
        keys += ["script", "script_args", "framework", "launcher"]
    return portable({k: getattr(args, k) for k in keys if hasattr(args, k)})  # recorded: no machine paths


def resume(path: Path, kind: str, key: dict, tag: str) -> Tuple[str, Dict[int, List[int]]]:
    """(sweep id, {nodes: [readers...]} of points with an ok record) of the newest matching sweep in
    ``path``, or a new sweep id and nothing done."""
    recs = records.read_records(path)[0] if Path(path).exists() else []
    mine = [r for r in recs if r.kind == kind and r.scaling_key == key]
    if not mine:
        return records.new_sweep_id(kind, tag), {}
    sweep = max(mine, key=lambda r: r.time).sweep
    done = records.group_by([r for r in mine if r.sweep == sweep and r.ok], lambda r: r.point.nodes)
    # storage points have readers per node; a training point has none (0)
    return sweep, {nodes: [getattr(r.point, "readers_per_node", None) or 0 for r in rs] for nodes, rs in done.items()}


def train_points(args: argparse.Namespace, sweep: str, done: Dict[int, List[int]], scratch_root: Path,
                 runs_root: Path) -> List[Point]:
    r = train_bench.SlurmRunner.from_args(args, args.time, python=args.python)
    procs = args.gpus_per_node or args.procs_per_node
    workers = args.workers if args.workers is not None else (8 if args.gpus_per_node else 0)
    params = parameter_count(args.arch)
    out = []
    for n in sorted(set(args.nodes)):
        if n in done:
            log.info("nodes %d: already recorded in sweep %s, skipped", n, sweep)
            continue
        p = train_bench.TrainPoint(variant=args.variant, procs_per_node=procs, nodes=n, batch_size=args.batch,
                                   precision=args.precision, data=args.data, arch=args.arch, image_size=args.image_size,
                                   epochs=1, steps_per_epoch=args.steps_per_epoch, val_steps=1, workers=workers,
                                   extra_args=tuple(args.extra))
        scratch, keep = scratch_root / sweep / p.name, runs_root / sweep / p.name
        extra = record_context(args, "slurm", scaling_key=same_sweep_key(args))

        def finish(pt: Point, point=p, scratch=scratch, keep=keep, extra=extra) -> dict:
            if pt.error:
                return train_bench.failed_train_record(point, sweep, pt.error, extra)
            return train_bench.train_record(point, r.outcome(scratch, 0, pt.t0), sweep, params, extra, scratch, keep)
        why = train_bench.check(p)
        if why:
            raise BenchError(why)
        out.append(Point(f"{n} node(s) x {procs} process(es)", scratch, r.script(p, scratch), finish))
    return out


def script_train_points(args: argparse.Namespace, sweep: str, done: Dict[int, List[int]], scratch_root: Path,
                        runs_root: Path) -> List[Point]:
    """``--script``: one job per node count running the user's script (hpc_imagenet.harness.runners.script_points);
    the run folder stays where it ran (RUNS_ROOT is the engine's kept-files folder: nothing of a script's is
    copied)."""
    out = []
    for p in script_points.points(args, [n for n in args.nodes if n not in done]):
        scratch = scratch_root / sweep / p.name
        extra = record_context(args, "slurm", scaling_key=same_sweep_key(args))

        def finish(pt: Point, point=p, scratch=scratch, extra=extra) -> dict:
            return script_points.record(point, sweep, scratch, pt.error, extra)
        out.append(Point(f"{p.nodes} node(s) x {p.procs_per_node} process(es) of {Path(p.script).name}", scratch,
                         script_points.batch_file(p, args, scratch), finish))
    return out


def storage_points(args: argparse.Namespace, sweep: str, done: Dict[int, List[int]], scratch_root: Path,
                   runs_root: Path) -> List[Point]:
    """``--io``: one job per (nodes, readers per node) reading --data (hpc_imagenet.harness.runners.storage_bench)."""
    data = Path(args.data)
    if args.data == "dummy" or not data.is_dir():
        raise BenchError(f"--io reads --data from the shared filesystem; {args.data} is not a folder")
    fmt = args.format_label or storage_bench.data_format(data)
    r = train_bench.SlurmRunner.from_args(args, args.time, python=args.python)
    out = []
    for n in sorted(set(args.nodes)):
        for k in sorted(set(args.readers)):
            if k in done.get(n, []):
                continue
            name = f"read_n{n}x{k}_{fmt}"
            scratch = scratch_root / sweep / name
            # readers need no GPU: a CPU job (--constraint/--partition pick the nodes)
            spec = generate.JobSpec(name=f"bench-{name}"[:60], nodes=n, gpus_per_node=0, tasks_per_node=k,
                                    procs_per_node=k,
                                    cpus_per_task=args.cpus_per_task or 1, launcher="srun", data=str(data),
                                    requeue=False, time=args.time, output=str(scratch / "slurm-%j.out"), **r.options)
            point = {"nodes": n, "readers_per_node": k, "format": fmt, "data": portable(str(data)),
                     "seconds": args.seconds, "cache": args.cache}

            def finish(pt, scratch=scratch, point=point, nodes=n, readers=k) -> dict:
                # the submitting host's software; the nodes' names are in the metrics' readers
                env = portable({**environment(nodes), "slurm_job_id": pt.job})
                extra = record_context(args, "slurm", scaling_key=same_sweep_key(args), wall_s=time.monotonic() - pt.t0)
                m, error = {}, pt.error
                if not error:
                    try:
                        m = storage_bench.metrics(scratch, nodes, readers)
                    except (OSError, ValueError) as e:
                        error = f"{e}; {(slurm_client.job_output(scratch).splitlines()[-1:] or ['(no job output)'])[0]}"
                return records.make_record("storage", sweep, point, m, env, "failed" if error else "ok", error, **extra)
            script = generate.render_step(spec, storage_bench.job_body(args, k))
            out.append(Point(f"{n} node(s) x {k} reader(s)", scratch, script, finish))
    return out


def submit_and_collect(points: List[Point], args: argparse.Namespace) -> int:
    """Submit every point, print each state change, record each point as its job ends; the number
    of failed points. Interrupted (KeyboardInterrupt) or out of time (slurm_client.Timeout), every
    job still queued or running is cancelled first; nothing is recorded for those, so a rerun
    redoes them."""
    by_job: Dict[str, Point] = {}
    failed = 0

    def record(point: Point) -> None:
        nonlocal failed
        rec = point.finish(point)
        records.append(args.records, rec)
        failed += not from_dict(rec).ok
        log.info("%s: %s", point.label, _summary(rec))
    try:
        previous = None
        for p in points:
            p.scratch.mkdir(parents=True, exist_ok=True)
            path = p.scratch / "job.sh"
            write_text(path, p.script)
            after = [f"--dependency=afterany:{previous}"] if previous and not args.concurrent else []
            try:
                p.job = slurm_client.submit(path, [*after, *train_bench.SlurmRunner.sbatch_argv(p.scratch)],
                                           cwd=train_bench.REPO, env=train_bench.child_env())
            except slurm_client.SlurmError as e:  # e.g. more nodes than the partition has: the rest goes on
                p.error = str(e)
                record(p)
                continue
            by_job[p.job] = p
            previous = p.job
            log.info("%s: submitted job %s", p.label, p.job)
    except BaseException:
        slurm_client.cancel(list(by_job))
        raise

    def on_change(job: str, state: str) -> None:
        p = by_job[job]
        if state == slurm_client.DONE:
            record(p)
        else:
            log.info("%s: job %s %s", p.label, job, state)
    slurm_client.wait(list(by_job), on_change, args.timeout)
    return failed


def _summary(rec: dict) -> str:
    r = from_dict(rec)
    m, job = r.metrics, r.environment.slurm_job_id
    if not r.ok:
        numbers = f"FAILED: {r.error}"
    elif r.kind == "storage":
        numbers = f"{m.mb_per_s:.1f} MB/s, {m.files_per_s:.1f} files/s in all"
    else:
        numbers = f"{m.images_per_s:.1f} images/s ({r.world_size} processes), {m.step_time_ms:.1f} ms/step"
    return (f"job {job} done, " if job else "") + numbers


# ---------------------------------------------------------------- command line

def add_parser(sub, common: argparse.ArgumentParser) -> None:
    c = sub.add_parser("scaling", parents=[common], help="node-count sweep on this SLURM cluster (one job per "
                       "point; --io: readers x nodes on the shared filesystem), then the report")
    add_flags(c, nodes=list(DEFAULT_NODES))
    c.add_argument("--gpus-per-node", type=int, default=4, help="GPUs (= training processes) per node; 0: CPU nodes")
    c.add_argument("--procs-per-node", type=int, default=1, help="training processes per CPU node (--gpus-per-node 0)")
    train_bench.add_sbatch_flags(c)
    c.add_argument("--time", default="00:30:00", help="time limit of each job (SLURM format)")
    c.add_argument("--python", help="interpreter in the jobs (default: this one; 'python' when --setup is given)")
    c.add_argument("--data", default="dummy", help="dataset root on the shared filesystem ('dummy': synthetic)")
    c.add_argument("-a", "--arch", default="resnet50")
    c.add_argument("--batch", type=int, default=256, help="batch per process")
    add_flags(c, image_size=224, steps_per_epoch=100)
    c.add_argument("--workers", type=int, help="loader workers per process (default 8 on GPUs, 0 on CPUs)")
    c.add_argument("--variant", default="ddp", choices=["ddp", "amp"])
    c.add_argument("--precision", default="O0", choices=["O0", "O1", "O2", "O3"], help="--opt-level (amp variant)")
    c.add_argument("--extra", action="append", default=[], help="one more engine flag (repeatable)")
    c.add_argument("--note", help="recorded with every point and shown in the report")
    c.add_argument("--timeout", type=float, help="seconds for the whole sweep; then every job is cancelled")
    c.add_argument("--concurrent", action="store_true", help="let points run at the same time (default: one "
                   "after the other, so they do not share nodes or storage)")
    c.add_argument("--fresh", action="store_true", help="start a new sweep even if this tag has one (earlier "
                   "records stay in the file)")
    c.add_argument("--dry-run", action="store_true", help="print the batch files, submit nothing")
    c.add_argument("--no-report", dest="report", action="store_false", help="skip regenerating the report")
    script_points.add_flags(c)
    io = c.add_argument_group("--io: storage read throughput seen from the nodes")
    io.add_argument("--io", action="store_true", help="sweep readers per node x nodes reading --data")
    io.add_argument("--readers", nargs="+", type=int, default=[1, 4], help="reader processes per node")
    io.add_argument("--seconds", type=float, default=30, help="each reader stops after this long (or all files)")
    io.add_argument("--cache", choices=["evict", "as-is"], default="evict", help="evict: each reader drops a "
                    "file's cached pages before reading it (posix_fadvise, no root), so reads reach storage")
    io.add_argument("--format-label", help="the data format's name in the report (default: detected, imagefolder "
                    "or shards; e.g. staged-shards for a node-local copy)")
