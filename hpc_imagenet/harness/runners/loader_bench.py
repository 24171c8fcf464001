"""What a training script of your own gets from each data loader on the CPU: ``python -m hpc_imagenet.harness.bench
loaders``. Every loader is this project's library (``image_loaders``, as a user's script calls it) on the same
JPEGs, with the same RandomResizedCrop, flip, batch and loader workers; only the backend and what the script takes
differ:

- ``baseline``: pytorch/examples' path (PIL, torchvision's transforms, ToTensor and Normalize in the workers):
  float32, normalised;
- ``fast``: this project's decoder, uint8 batches (``data.train_batches``, what the engine feeds its device);
- ``fast-float32``: the same batches normalised to float32 on the CPU as ``data.train`` hands them (what a CPU
  script takes);
- ``dali``: DALI's CPU operators (``--data-backend dali``), where DALI is installed.

A first pass over the training split starts each loader's workers; then each round runs one measured pass of every
loader in turn, so a busy moment of the machine falls on all of them alike. Each pass counts the CPU seconds of
the whole process tree (the workers' and the receiving process's) and the wall seconds. The records are pipeline
records (``loader``: which one) with each loader's images/s per core and its ratio to the baseline's in the same
round, as ``bench pipeline`` records the decoders alone. FFCV, which reads its own dataset format and builds from
source, is not among them. Written here, not with a benchmark library: the measurement is one timed pass of
loaders this project builds.
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

from hpc_imagenet.imagenet.common import cputime
from hpc_imagenet.imagenet.data.decode import dali
from hpc_imagenet.imagenet.data.library import image_loaders
from hpc_imagenet.harness.runners import common
from hpc_imagenet.harness.runners import pipeline_bench as pipelines
from hpc_imagenet.harness.runners.common import BenchError
from hpc_imagenet.harness.runners.procs import torch_threads

log = logging.getLogger(__name__)

# a loader: (the library's --data-backend, whether the script takes the normalised float32 batches)
LOADERS: Dict[str, Tuple[str, bool]] = {"baseline": ("baseline", False), "fast": ("fast", False),
                                        "fast-float32": ("fast", True), "dali": ("dali", False)}
Epoch = Callable[[int], Iterable]  # epoch number -> that epoch's training batches


def available() -> List[str]:
    """The loaders this machine can run (DALI's only where it is installed)."""
    try:
        dali.require_dali()
    except dali.DaliUnavailable:
        return [name for name in LOADERS if name != "dali"]
    return list(LOADERS)


def check_names(names: Sequence[str]) -> None:
    """BenchError, one line, for a loader that is unknown or cannot run here."""
    runnable = available()
    for name in names:
        if name not in LOADERS:
            raise BenchError(f"--loaders {name}: unknown; choose from {', '.join(LOADERS)}")
        if name not in runnable:
            raise BenchError(f"--loaders {name}: DALI is not installed here; pip install nvidia-dali-cuda130 (its CPU "
                             "operators need no GPU), or leave dali out")


def loader(name: str, root: Path, batch: int, image_size: int, workers: int) -> Epoch:
    """NAME's training batches of an epoch, from the library as a user's script builds it (one process)."""
    backend, normalised = LOADERS[name]
    data = image_loaders(root, batch_size=batch, image_size=image_size, workers=workers, backend=backend,
                         device="cpu", rank=0, world_size=1)

    def epoch(number: int) -> Iterable:
        data.set_epoch(number)
        return data.train if normalised else data.train_batches
    return epoch


def one_pass(name: str, epoch: Epoch, number: int, workers: int, round_: int) -> pipelines.Measurement:
    cpu0, wall0 = cputime.process_tree_cpu_s(), time.perf_counter()
    images = sum(len(target) for _, target in epoch(number))
    wall, cpu = time.perf_counter() - wall0, cputime.process_tree_cpu_s() - cpu0
    return pipelines.Measurement(name, "train", workers, images, wall, cpu, round_)


def bench(root: Path, names: Sequence[str], batch: int, image_size: int, workers: int,
          rounds: int) -> List[pipelines.Measurement]:
    """A first pass of every loader (it starts the workers), then ROUNDS measured passes of each in turn."""
    results = []
    with torch_threads(1):  # per core means one core: no intra-op threads in the receiving process
        epochs = {name: loader(name, root, batch, image_size, workers) for name in names}
        for name, epoch in epochs.items():
            one_pass(name, epoch, 0, workers, -1)  # not kept: the workers' start-up
        for round_ in range(rounds):
            for name, epoch in epochs.items():
                measured = one_pass(name, epoch, round_ + 1, workers, round_)
                log.info("round %d %-12s %.0f images/s per core, %.0f images/s wall", round_, name,
                         measured.per_core, measured.wall_rate)
                results.append(measured)
    return results


def add_parser(sub, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("loaders", parents=[parent], help="what your own script gets from each data loader on "
                            "the CPU: this project's uint8 and float32 batches, DALI's CPU operators and "
                            "pytorch/examples' PIL path on the same JPEGs (images/s per core)")
    parser.add_argument("--data", help="ImageFolder root with train/ and val/ (default: generated ImageNet-like "
                        "JPEGs)")
    parser.add_argument("--images", type=int, default=5000, help="generated training images (with no --data)")
    parser.add_argument("--loaders", nargs="+", help=f"of {', '.join(LOADERS)} (default: all this machine runs)")
    common.add_flags(parser, workers=2, rounds=3, image_size=224, batch=64)


def run(args: argparse.Namespace) -> List[dict]:
    names = args.loaders or available()
    check_names(names)
    root = common.jpeg_root(args.data, 4, -(-args.images // 4))
    sweep = common.new_sweep("pipeline", args)
    common.progress(1, 1, f"loaders {', '.join(names)} on {root}: batch {args.batch}, {args.workers} worker(s), "
                    f"{args.rounds} round(s)")
    results = bench(root, names, args.batch, args.image_size, args.workers, args.rounds)
    for row in pipelines.record(sweep, results, "loader", image_size=args.image_size, batch_size=args.batch,
                                images=results[0].images, data=common.repo_relative(root)):
        ratio = row["ratio_per_core"]
        log.info("    %-12s %.0f images/s per core%s", row["backend"], row["images_per_cpu_s"],
                 f", {ratio:.2f}x the baseline" if ratio else "")
    return sweep.done
