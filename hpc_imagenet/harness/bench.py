"""Benchmark harness: ``python -m hpc_imagenet.harness.bench train|io|allreduce|pipeline|loaders|quick|scaling|shards|
faults ...``.

The one command line on top of results/ (results/README.md lists the runner of each kind): it parses,
picks the runner and, where the kind ends with one, writes the report. Each measured point appends one
JSON record to ``results/records/<tag>.jsonl`` (see :mod:`hpc_imagenet.harness.core.records`); a point that fails is
recorded as failed with the reason, and the sweep goes on. ``train``, ``io``, ``allreduce`` and
``pipeline`` run here (:mod:`hpc_imagenet.harness.runners.local`); ``quick``, the preset behind ``make bench``, is
a small but complete set of those on a CPU machine in a few minutes, then the report. What each kind
measures: ``python -m hpc_imagenet.harness.bench KIND --help``.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from hpc_imagenet.imagenet.common.variants import SCRIPTS
from hpc_imagenet.imagenet.config.choices import AUTO_AUGMENT_POLICIES
from hpc_imagenet.harness import report
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import from_dict
from hpc_imagenet.harness.core.records import RUNS_DIR, SCRATCH_DIR
from hpc_imagenet.harness.core.setups import CPU_SETUPS, SETUPS
from hpc_imagenet.harness.runners import data_scale_bench, faults_bench, loader_bench, local, scaling, train_bench
from hpc_imagenet.harness.runners.common import BenchError, add_flags, progress
from hpc_imagenet.slurm import client as slurm_client
from hpc_imagenet.slurm.generate import GenerateError

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- quick preset

QUICK_DEMO = SCRATCH_DIR / "demo"


def run_quick(args: argparse.Namespace) -> int:
    """Everything ``make bench`` measures on a 2-core CPU machine, then the report."""
    t0 = time.monotonic()
    if args.fresh:
        _forget(args.tag, args.records)
    common = ["--tag", args.tag, "--records", str(args.records)]
    setups = ["--setups", *CPU_SETUPS, "--procs", "1", "--batch", "16", "--image-size", "64",
              # the JPEG set holds 8 batches: 6 epochs of 8 give 36 measured steps (2 warm-up steps an epoch)
              "--epochs", "6", "--steps-per-epoch", "8", "--val-steps", "1"]
    steps = [
        ["allreduce", "--world-sizes", "2", "--max-bytes", str(16 << 20), *common],
        ["io", "--classes", "4", "--per-class", "32", "--images", "128", "--workers", "0", "2",
         "--readers", "2", "--batch", "16", *common],
        # the pipelines' steady-state cost per image on the same files (the io points include start-up)
        ["pipeline", "--images", "128", "--workers", "0", "2", "--rounds", "3", *common],
        # the step against the pytorch/examples-style baseline, on synthetic data and on the io step's JPEGs
        ["train", *setups, "--data", "dummy", str(SCRATCH_DIR / "jpegs"), *common],
        ["train", "--procs", "1", "2", "--batch", "16", "--epochs", "1", "--steps-per-epoch", "30",
         "--val-steps", "1", *common],
        ["train", "--data", str(_demo_data()), "--procs", "1", "2", "--batch", "16", "--epochs", "4",
         "--steps-per-epoch", "8", "--val-steps", "4", "--extra=--seed=0", *common],
    ]
    for i, argv in enumerate(steps, 1):
        progress(i, len(steps) + 1, f"quick: bench {argv[0]}")
        main(argv)
    progress(len(steps) + 1, len(steps) + 1, "quick: report")
    rc = report.main([])
    log.info("quick preset done in %.0f s", time.monotonic() - t0)
    return rc


def report_of(records_file: Path, tag: str) -> int:
    """The reports of the records file a sweep wrote: results/RESULTS.md and results/reports/<tag>/ for
    the default folder, else RESULTS.md and reports/<tag>/ next to the file."""
    records_file = Path(records_file)
    if records_file.resolve().parent == records.RECORDS_DIR.resolve():
        rc = report.main([])  # every records file gets its report: <tag>.jsonl -> reports/<tag>/
        out = records.RESULTS_DIR
    else:
        out = records_file.resolve().parent
        rc = report.main(["--records", str(records_file), "--out", str(out)])
    if rc == 0 and records_file.stem != tag:  # a --records file not named for its tag
        rc = report.main(["--tag", tag, "--records", str(records_file), "--out", str(out)])
    return rc


def _demo_data() -> Path:
    """The engine's demo ImageFolder (10 classes of 64x64 shapes), generated once."""
    if not (QUICK_DEMO / "train").is_dir():
        from hpc_imagenet.imagenet.data import demo
        demo.main([str(QUICK_DEMO), "--classes", "10", "--train-per-class", "32", "--val-per-class", "8"])
    return QUICK_DEMO


def _forget(tag: str, path: Path) -> None:
    """--fresh: drop this tag's records file and kept runs, so the report shows one run."""
    path.unlink(missing_ok=True)
    for d in RUNS_DIR.glob(f"{tag}-*"):
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
    # the docstring's first paragraph (two lines; argparse joins them into one)
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.harness.bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    # no default here: parents share their action objects, so a subparser's set_defaults(tag=...)
    # would change every command's default; main() picks it per command (DEFAULT_TAGS)
    common.add_argument("--tag", help="name of this machine/run set; records go to results/records/<tag>.jsonl "
                        "and sweep ids start with it (default: local; quick: quick; scaling: scaling; loaders: "
                        "cpu-loaders)")
    common.add_argument("--records", type=Path, help="records file (default results/records/<tag>.jsonl)")
    common.add_argument("-v", "--verbose", action="store_true")
    for add in (_add_train, _add_io, _add_allreduce, _add_pipeline, _add_quick, scaling.add_parser,
                data_scale_bench.add_parser, faults_bench.add_parser, loader_bench.add_parser):
        add(sub, common)
    return p


def _add_train(sub, common: argparse.ArgumentParser) -> None:
    t = sub.add_parser("train", parents=[common], help="training throughput sweep (runs the engine)")
    t.add_argument("--variants", nargs="+", default=["ddp"], choices=list(SCRIPTS))
    t.add_argument("--procs", nargs="+", type=int, default=[1, 2], help="processes (GPUs) per node")
    t.add_argument("--batch", nargs="+", type=int, default=[16], help="batch per process")
    t.add_argument("--precision", nargs="+", default=["O0"], choices=["O0", "O1", "O2", "O3"])
    t.add_argument("--setups", nargs="+", choices=list(SETUPS),
                   help="named step configurations instead of --variants x --precision, compared with the "
                        "pytorch/examples-style 'baseline' at the same batch and data: "
                        + "; ".join(f"{k}: {v.about}" for k, v in SETUPS.items()))
    t.add_argument("--amp-dtype", choices=["float16", "bfloat16"])
    t.add_argument("--data", nargs="+", default=["dummy"], help="'dummy' and/or dataset directories")
    t.add_argument("-a", "--arch", default="resnet18")
    add_flags(t, nodes=[1], image_size=64, epochs=1, steps_per_epoch=30, val_steps=1, workers=0)
    t.add_argument("--extra", action="append", default=[], help="one more engine flag (repeatable), "
                   "e.g. --extra=--channels-last")
    t.add_argument("--submit", choices=["local", "slurm"], default="local",
                   help="local: torchrun here; slurm: one sbatch job per point (hpc_imagenet.slurm.generate)")
    t.add_argument("--gpus-per-node", type=int, default=4, help="with --submit slurm (0: CPU nodes)")
    t.add_argument("--time-limit", default="01:00:00", help="with --submit slurm")
    train_bench.add_sbatch_flags(t, "with --submit slurm: ")
    t.add_argument("--timeout", type=float, default=1800, help="seconds per point (slurm: then the job is "
                   "cancelled)")
    t.add_argument("--keep-checkpoints", action="store_true", help="keep results/scratch run folders")
    t.add_argument("--note", help="recorded with every point and shown in the report (e.g. what the nodes share)")


def _add_io(sub, common: argparse.ArgumentParser) -> None:
    i = sub.add_parser("io", parents=[common], help="data-loading throughput (no model)")
    i.add_argument("--data", help="ImageFolder root with train/ (default: generated ImageNet-like JPEGs)")
    i.add_argument("--classes", type=int, default=4, help="generated dataset: classes")
    i.add_argument("--per-class", type=int, default=64, help="generated dataset: images per class")
    i.add_argument("--backends", nargs="+", help="loader backends (default: all available)")
    i.add_argument("--readers", nargs="+", type=int, default=[1, 2], help="concurrent reader processes")
    i.add_argument("--reader-workers", type=int, default=0, help="loader workers of each concurrent reader")
    i.add_argument("--cache", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    add_flags(i, workers=[0, 1, 2], batch=32, image_size=224)
    i.add_argument("--images", type=int, default=256, help="images read per reader and point")
    i.add_argument("--threads", type=int, default=1, help="torch threads of a reader (as a loader worker)")


def _add_allreduce(sub, common: argparse.ArgumentParser) -> None:
    r = sub.add_parser("allreduce", parents=[common], help="collective bandwidth (nccl-tests style)")
    r.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl with CUDA, else gloo")
    r.add_argument("--min-bytes", type=_size, default=4)
    r.add_argument("--max-bytes", type=_size, default=64 << 20)
    add_flags(r, world_sizes=[2], factor=4)


def _add_pipeline(sub, common: argparse.ArgumentParser) -> None:
    pl = sub.add_parser("pipeline", parents=[common], help="steady-state decode cost per image of each backend "
                        "(lockstep rounds; ratio to the baseline backend)")
    pl.add_argument("--data", help="ImageFolder root with train/ (default: the generated ImageNet-like JPEGs)")
    pl.add_argument("--images", type=int, default=256, help="images per pass")
    pl.add_argument("--auto-augment", choices=AUTO_AUGMENT_POLICIES, help="a policy after every backend's crop "
                    "(the training split), e.g. ta_wide: the fast backend's against torchvision's PIL pipeline")
    add_flags(pl, workers=[0, 2], backends=["baseline", "fast"], rounds=3, image_size=224, batch=32)


def _add_quick(sub, common: argparse.ArgumentParser) -> None:
    q = sub.add_parser("quick", parents=[common], help="the make-bench preset: all kinds, small, then report")
    q.add_argument("--fresh", action="store_true", help="replace this tag's earlier records and runs")


DEFAULT_TAGS = {"quick": "quick", "scaling": "scaling", "faults": "faults", "loaders": "cpu-loaders"}


def resolve_tag(args: argparse.Namespace) -> None:
    """The command's default tag and records file where none were given."""
    args.tag = args.tag or DEFAULT_TAGS.get(args.cmd, "local")
    args.records = args.records or records.RECORDS_DIR / f"{args.tag}.jsonl"


def validate_counts(args: argparse.Namespace) -> None:
    """Counts that cannot work, as one line naming the flag."""
    for name, low in (("procs", 1), ("nodes", 1), ("batch", 1), ("readers", 1), ("images", 1),
                      ("workers", 0), ("reader_workers", 0), ("threads", 1), ("world_sizes", 2), ("rounds", 1)):
        given = getattr(args, name, None)
        bad = [v for v in (given if isinstance(given, list) else [] if given is None else [given]) if v < low]
        if bad:
            raise BenchError(f"--{name.replace('_', '-')} {bad[0]} is not allowed; use values >= {low}"
                             + (" (the bus bandwidth of one process is 0)" if name == "world_sizes" else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO, format="%(message)s")
    resolve_tag(a)
    try:
        validate_counts(a)
        if a.cmd == "quick":
            return run_quick(a)
        if a.cmd == "scaling":
            rc = scaling.run(a)
            # a sweep that ran (or had nothing left to run) ends with the report; a dry run, an
            # interrupted or a wholly failed sweep does not
            return report_of(a.records, a.tag) if rc == 0 and a.report and not a.dry_run else rc
        if a.cmd == "faults":
            rc = faults_bench.run(a)
            return rc or (report.main([]) if a.report else 0)
        out = {"train": local.run_train, "io": local.run_io, "allreduce": local.run_allreduce,
               "pipeline": local.run_pipeline, "shards": data_scale_bench.run, "loaders": loader_bench.run}[a.cmd](a)
    except (BenchError, slurm_client.SlurmError, GenerateError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = sum(not from_dict(r).ok for r in out)
    log.info("%d point(s) recorded in %s, %d failed", len(out), a.records, failed)
    return 1 if failed == len(out) and out else 0


if __name__ == "__main__":
    from hpc_imagenet.harness.bench import main  # under its one name, not a copy
    # `kill` stops a benchmark as Ctrl-C does: what it runs is stopped with it, not left running
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
