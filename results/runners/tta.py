"""``python -m results.bench time-to-accuracy``: time to a target top-1 on real photographs,
pytorch/examples' ``main.py`` against this project's engine with its own recipe.

1. Fashion-MNIST (the Debian package's four files) becomes an ImageFolder of RGB JPEGs once
   (:mod:`results.runners.fashion_mnist`).
2. Phase ``examples``: ``main.py`` with its defaults for 10 epochs, evaluating after each
   (:mod:`results.runners.examples_main`); the target is the best top-1 it reached.
3. Phase ``ours``: ResNet-18 with :data:`RECIPE_FLAGS` on the same images and cores, stopping at
   the first epoch end past the wall time ``main.py`` used (``--time-budget-minutes``); the target
   comes from the newest examples record, so the phases can run at different times.

Each phase appends one ``time_to_accuracy`` record: the curve (top-1 after each evaluation against
wall time since the start, evaluation included), time to the target, wall and CPU seconds, epochs,
the recipe, and the machine's load average while it ran.
"""
from __future__ import annotations

import argparse
import logging
import subprocess
from pathlib import Path
from typing import List, Optional

from results.core import records
from results.core.records import SCRATCH_DIR
from results.runners import examples_main, fashion_mnist
from results.runners.common import BenchError, environment

log = logging.getLogger(__name__)

KIND = "time_to_accuracy"
DEFAULT_TAG = "tta"
EXAMPLES_PROGRAM = "pytorch/examples imagenet/main.py"
OURS_PROGRAM = "hpc-imagenet"
# 32 px, not the photos' 28: a multiple of ResNet's total stride (32), so every stage halves the
# feature map evenly down to 1x1 (28 px rounds at three stages), and the size the first manual
# trials of both programs used, so their timings carry over. It costs (32/28)^2 = 1.3x the compute.
IMAGE_SIZE = 32
EXAMPLES_EPOCHS = 10
EXAMPLES_NOTE = ("main.py's step decay (LR x0.1 every 30 epochs) does not fire within 10 epochs: its LR "
                 "stays 0.1 throughout")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("time-to-accuracy", parents=[common],
                       help="time to a target top-1 on Fashion-MNIST: pytorch/examples main.py vs this engine")
    p.add_argument("--phase", choices=("examples", "ours", "both"), default="both",
                   help="examples: main.py's 10 epochs (sets the target and the time budget); ours: this "
                        "engine against the newest examples record; both: one after the other")
    p.add_argument("--examples", type=Path, metavar="DIR", help="a pytorch/examples checkout (git clone "
                   "https://github.com/pytorch/examples); needed by the examples phase")
    p.add_argument("--fashion-mnist", type=Path, default=fashion_mnist.SOURCE_DIR, metavar="DIR",
                   help="folder holding the four *-ubyte.gz files (default: the Debian package's)")
    p.add_argument("--cache", type=Path, default=SCRATCH_DIR / "datasets", metavar="DIR",
                   help="where the converted ImageFolder is written once and reused")
    p.add_argument("--image-size", type=int, default=IMAGE_SIZE, help="training crop of both programs "
                   "(validation: resize to size*256/224, centre crop)")
    p.add_argument("--examples-epochs", type=int, default=EXAMPLES_EPOCHS)
    p.add_argument("--train-per-class", type=int, help="a slice: the first N training images of each class")
    p.add_argument("--val-per-class", type=int, help="a slice: the first N test images of each class")
    p.add_argument("--timeout-minutes", type=float, default=240, help="stop main.py past this")


def run(a: argparse.Namespace) -> List[dict]:
    data = fashion_mnist.convert(a.fashion_mnist, a.cache, a.train_per_class, a.val_per_class)
    log.info("data: %s (%s)", data, ", ".join(fashion_mnist.classes_of(data)))
    out: List[dict] = []
    if a.phase in ("examples", "both"):
        out.append(run_examples(a, data))
    if a.phase in ("ours", "both"):
        raise BenchError("the ours phase is not built yet")
    return out


# ---------------------------------------------------------------- phase: examples

def run_examples(a: argparse.Namespace, data: Path) -> dict:
    if a.examples is None:
        raise BenchError("the examples phase needs --examples DIR, a pytorch/examples checkout "
                         "(git clone https://github.com/pytorch/examples DIR)")
    sweep = records.new_sweep_id("examples", a.tag)
    log_file = SCRATCH_DIR / "tta" / sweep / "main.log"
    log.info("examples: main.py for %d epochs at %d px; every line in %s", a.examples_epochs, a.image_size, log_file)
    result = examples_main.run(a.examples, data, a.image_size, a.examples_epochs, log_file,
                               timeout_s=a.timeout_minutes * 60)
    images = fashion_mnist.counts_of(data)["train"]
    point = {"program": EXAMPLES_PROGRAM, "examples_commit": _commit(a.examples), "arch": "resnet18",
             "data": data.name, "image_size": a.image_size, "epochs_planned": a.examples_epochs,
             "eval_every": 1, "recipe": dict(examples_main.DEFAULTS),
             "changed_in_copy": [f"{old} -> {new}" for old, new in examples_main.size_replacements(a.image_size)]}
    extra = {"curve": result.curve, "notes": [EXAMPLES_NOTE], "log": str(log_file)}
    if result.returncode != 0 or not result.curve:
        rec = records.make_record(KIND, sweep, point, {}, environment(), status="failed",
                                  error=f"main.py exited {result.returncode}: {result.tail[-1] if result.tail else ''}",
                                  **extra)
    else:
        best = max(p["top1"] for p in result.curve)
        rec = records.make_record(KIND, sweep, point, tta_metrics(result.curve, best, result.wall_s,
                                                                  result.core_s, images, result.eval_s, 1,
                                                                  result.load), environment(), **extra)
    records.append(a.records, rec)
    _say(rec)
    return rec


def tta_metrics(curve: List[dict], target: float, wall_s: float, core_s: float, train_images: int,
                eval_s: float, eval_every: int, load: dict) -> dict:
    """The numbers of a time_to_accuracy record from its curve (top-1 in %, wall_s since the start)."""
    reached = next((p for p in curve if p["top1"] >= target), None)
    epochs = curve[-1]["epoch"] if curve else 0
    return {"target_top1": target, "time_to_target_s": reached["wall_s"] if reached else None,
            "epochs_to_target": reached["epoch"] if reached else None,
            "best_top1": max((p["top1"] for p in curve), default=0.0), "wall_s": round(wall_s, 2),
            "core_s": round(core_s, 2), "epochs": epochs, "images_seen": epochs * train_images,
            "eval_s": round(eval_s, 2), "eval_every": eval_every, **load}


def _commit(checkout: Path) -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _say(rec: dict) -> None:
    m = rec["metrics"]
    if rec["status"] != "ok":
        log.info("%s: failed: %s", rec["point"]["program"], rec["error"])
        return
    log.info("%s: best top-1 %.2f %% after %d epochs, target %.2f %% reached at %s s; %.0f s wall, %.0f CPU s",
             rec["point"]["program"], m["best_top1"], m["epochs"], m["target_top1"], m["time_to_target_s"],
             m["wall_s"], m["core_s"])
