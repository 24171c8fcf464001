"""``python -m results.bench time-to-accuracy``: time to a target top-1 on real photographs,
pytorch/examples' ``main.py`` against this project's engine with its own recipe.

1. Fashion-MNIST (the Debian package's four files) becomes an ImageFolder of RGB JPEGs once
   (:mod:`results.runners.fashion_mnist`).
2. Phase ``examples``: ``main.py`` with its defaults for 10 epochs, evaluating after each
   (:mod:`results.runners.examples_main`); the target is the best top-1 it reached.
3. Phase ``ours``: ResNet-18 with :func:`recipe_flags` on the same images and cores, recording when
   it reaches the target and stopping at the first epoch end past the wall time ``main.py`` used
   (``--time-budget-minutes``); the target and budget come from the newest examples record of the
   records file, so the phases can run at different times.

Each phase appends one ``time_to_accuracy`` record: the curve (top-1 after each evaluation against
wall time since the start, evaluation included), time to the target, wall and CPU seconds, epochs,
the recipe, and the machine's load average while it ran.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

from imagenet.train import time_to_accuracy
from imagenet.config import section_of
from results.core import records
from results.core.records import RESULTS_DIR, SCRATCH_DIR
from results.runners import examples_main, fashion_mnist
from results.runners.common import BenchError, last_line, new_sweep
from results.runners.follow import Followed, Moment, follow

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
# This project's recipe for the ours phase, in one place to tune. The run also gets --image-size,
# --desired-acc (main.py's best) and --time-budget-minutes (main.py's wall time).
RECIPE_FLAGS = [
    "-b", "128", "--lr", "0.3",  # 0.15 at batch 128 after linear scaling (main.py: 0.1 at 256)
    "--lr-scheduler", "ramp", "--lr-peak-epoch", "1", "--warmup-epochs", "0",  # FFCV's ramp: up to epoch 1...
    # ...then linearly to 0 at epoch 14: about 115 s an epoch here (~520 images/s) plus two evaluations
    # of ~6 s fill main.py's 10 epochs of wall time (1,903 s recorded) with ~100 s to spare
    "--epochs", "14",
    "--train-crop-scale", "0.4", "1",  # 0.08 cuts 28-px photos to a few pixels: the main.py gap's first cause
    "--label-smoothing", "0.1", "--no-bn-wd", "--zero-init-residual", "--wd", "5e-5",  # FFCV's ResNet-18 values
    # torchvision's EMA of the weights, its horizon about an epoch (adjusted decay 1 - 2e-4 * 128 * 8 / 14:
    # ~68 updates of 8 steps); an evaluation counts the better of the model and its average
    "--model-ema", "--model-ema-steps", "8", "--model-ema-decay", "0.9998",
    "--eval-every", "1", "-j", "2", "--seed", "0",
]

REPO = RESULTS_DIR.parent
ENGINE = REPO / "imagenet" / "imagenet_ddp.py"
BOUND = 2.0  # the ours run is stopped past this multiple of main.py's wall time (it stops itself at 1x)...
START_ALLOWANCE_S = 120.0  # ...plus its start (imports, the data scan), which its budget does not count
ENGINE_EPOCH = re.compile(r"^ \* Epoch (\d+): val top1 ([\d.]+)\s+top5 ([\d.]+)")
# printed before its epoch's line
ENGINE_EMA = re.compile(r"^ \* EMA of the weights: val top1 ([\d.]+)\s+top5 ([\d.]+)")
PROGRESS_EVERY_S = 60.0
EXAMPLES_NOTE = ("main.py's step decay (LR x0.1 every 30 epochs) does not fire within 10 epochs: its LR "
                 "stays 0.1 throughout")


def recipe_flags(image_size: int) -> List[str]:
    """RECIPE_FLAGS, validating on the whole photo at the training size: the default centre crop (32
    of 36 px) cuts the garments' edges (a 3-epoch model: 87.19 -> 87.90 % top-1); a larger test size
    (FixRes) fell to 35 % at 36 px, where ResNet's last feature map is 2x2, not the 1x1 it trained on."""
    return [*RECIPE_FLAGS, "--val-resize-size", str(image_size), "--val-crop-size", str(image_size)]


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
    p.add_argument("--work", type=Path, default=SCRATCH_DIR / "tta", metavar="DIR",
                   help="where each run's log (and the engine's run folder) goes, one folder per sweep")


def run(args: argparse.Namespace) -> List[dict]:
    data = fashion_mnist.convert(args.fashion_mnist, args.cache, args.train_per_class, args.val_per_class)
    log.info("data: %s (%s)", data, ", ".join(fashion_mnist.classes_of(data)))
    out: List[dict] = []
    if args.phase in ("examples", "both"):
        out.append(run_examples(args, data))
    if args.phase in ("ours", "both"):
        out.append(run_ours(args, data))
    return out


def _point(program: str, data: Path, args: argparse.Namespace, **fields) -> dict:
    return {"program": program, "arch": "resnet18", "data": data.name, "image_size": args.image_size,
            "train_images": fashion_mnist.counts_of(data)["train"], **fields}


def _record(sweep: records.Sweep, point: dict, metrics: dict, error: Optional[str], **extra) -> dict:
    """The phase's record, appended; failed (no metrics) with ERROR."""
    rec = sweep.add(point, {} if error else metrics, "failed" if error else "ok", error, kind=KIND, **extra)
    _say(rec)
    return rec


# ---------------------------------------------------------------- phase: examples

def run_examples(args: argparse.Namespace, data: Path) -> dict:
    if args.examples is None:
        raise BenchError("the examples phase needs --examples DIR, a pytorch/examples checkout "
                         "(git clone https://github.com/pytorch/examples DIR)")
    sweep = new_sweep("examples", args)
    log_file = args.work / sweep.id / "main.log"
    log.info("examples: main.py for %d epochs at %d px; every line in %s", args.examples_epochs, args.image_size,
             log_file)
    lines, followed = examples_main.run(args.examples, data, args.image_size, args.examples_epochs, log_file,
                                        timeout_s=args.timeout_minutes * 60)
    point = _point(EXAMPLES_PROGRAM, data, args, examples_commit=_commit(args.examples),
                   epochs_planned=args.examples_epochs,
                   eval_every=1, recipe=dict(examples_main.DEFAULTS),
                   changed_in_copy=[f"{old} -> {new}" for old, new in examples_main.size_replacements(args.image_size)])
    error = _failure(followed, lines.curve, "main.py")
    best = max((p["top1"] for p in lines.curve), default=0.0)
    metrics = tta_metrics(lines.curve, best, followed, point["train_images"], lines.eval_s, 1)
    return _record(sweep, point, metrics, error, curve=lines.curve, notes=[EXAMPLES_NOTE], log=str(log_file))


# ---------------------------------------------------------------- phase: ours

def run_ours(args: argparse.Namespace, data: Path) -> dict:
    examples = examples_record(args.records, data.name, args.image_size)
    target, budget_s = examples["metrics"]["best_top1"], examples["metrics"]["wall_s"]
    sweep = new_sweep("ours", args)
    run_dir = args.work / sweep.id / "run"
    flags = recipe_flags(args.image_size)
    cmd = [sys.executable, "-u", str(ENGINE), str(data), "--image-size", str(args.image_size), *flags,
           "--desired-acc", f"{target:.3f}", "--time-budget-minutes", f"{budget_s / 60:.3f}", "--log-dir", str(run_dir)]
    log.info("ours: target %.2f %% top-1 (main.py's best), budget %.0f s (main.py's wall time); recipe %s",
             target, budget_s, " ".join(flags))
    lines = EngineLines()
    followed = follow(cmd, REPO, run_dir.parent / "engine.log", lines, timeout_s=BOUND * budget_s + START_ALLOWANCE_S)
    run_json = _read_json(run_dir / "run.json")
    engine_tta = run_json.get("time_to_accuracy") or {}
    in_budget = [p for p in lines.curve if p["wall_s"] <= budget_s]
    metrics = tta_metrics(lines.curve, target, followed, fashion_mnist.counts_of(data)["train"],
                          engine_tta.get("eval_s", 0.0), _flag_value("--eval-every", 1))
    metrics.update(budget_s=round(budget_s, 2), best_top1_in_budget=max((p["top1"] for p in in_budget), default=None),
                   images_seen=sum(e.get("train_samples", 0) for e in run_json.get("epochs", [])) or None)
    point = _point(OURS_PROGRAM, data, args, recipe_flags=flags, recipe=_settings(run_json),
                   target_from=examples["sweep"])
    return _record(sweep, point, metrics, _failure(followed, lines.curve, "the engine"), curve=lines.curve,
                   engine_time_to_accuracy=engine_tta, engine_status=run_json.get("status"),
                   log=str(run_dir.parent / "engine.log"))


class EngineLines:
    """The curve read from the engine's per-epoch lines as they arrive."""

    def __init__(self) -> None:
        self.curve: List[dict] = []
        self._last_progress = 0.0
        self._ema: Optional[dict] = None  # the EMA's line, waiting for its epoch's

    def __call__(self, moment: Moment, line: str) -> None:
        now = moment.wall_s
        row, ema = ENGINE_EPOCH.match(line), ENGINE_EMA.match(line)
        if ema:
            self._ema = {"top1_ema": float(ema.group(1)), "top5_ema": float(ema.group(2))}
        elif row:
            point = {"epoch": int(row.group(1)) + 1, "wall_s": round(now, 2), "core_s": round(moment.cpu_s(), 2),
                     "top1": float(row.group(2)), "top5": float(row.group(3))}
            if self._ema:  # the engine's own rule: the better of the model and its average counts
                counted = time_to_accuracy.counted_top1({"val_top1": point["top1"],
                                                         "val_top1_ema": self._ema["top1_ema"]})
                point.update(top1_model=point["top1"], **self._ema, top1=counted)
                self._ema = None
            self.curve.append(point)
            log.info("ours: epoch %d top-1 %.2f %% at %.0f s%s", point["epoch"], point["top1"], now,
                     f" (model {point['top1_model']:.2f}, EMA {point['top1_ema']:.2f})" if "top1_ema" in point else "")
        elif line.startswith("Epoch") and now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            log.info("ours: %s (%.0f s)", line.strip()[:60], now)


def examples_record(path: Path, data: str, image_size: int) -> dict:
    """The newest ok examples record for DATA at IMAGE_SIZE in PATH: the target and the time budget."""
    recs = [r for r in records.load([path])[0] if r["kind"] == KIND and r["status"] == "ok"
            and r["point"]["program"] == EXAMPLES_PROGRAM and r["point"]["data"] == data
            and r["point"]["image_size"] == image_size] if Path(path).exists() else []
    if not recs:
        raise BenchError(f"no examples record for {data} at {image_size} px in {path}: run --phase examples first "
                         "(it sets the target and the time budget)")
    return sorted(recs, key=lambda r: r["time"])[-1]  # the last written on a tie (times are to the second)


def tta_metrics(curve: List[dict], target: float, followed: Followed, train_images: int, eval_s: float,
                eval_every: int) -> dict:
    """The numbers of a time_to_accuracy record from its curve (top-1 in %, wall_s since the start)."""
    reached = next((p for p in curve if p["top1"] >= target), None)
    epochs = curve[-1]["epoch"] if curve else 0
    return {"target_top1": target, "time_to_target_s": reached["wall_s"] if reached else None,
            "epochs_to_target": reached["epoch"] if reached else None,
            "core_s_to_target": reached.get("core_s") if reached else None,
            "best_top1": max((p["top1"] for p in curve), default=0.0), "wall_s": round(followed.wall_s, 2),
            "core_s": round(followed.core_s, 2), "epochs": epochs, "images_seen": epochs * train_images,
            "eval_s": round(eval_s, 2), "eval_every": eval_every, **followed.load}


def _failure(followed: Followed, curve: List[dict], program: str) -> Optional[str]:
    if followed.returncode == 0 and curve:
        return None
    return f"{program} exited {followed.returncode}: {last_line(chr(10).join(followed.tail))}"


def _settings(run_json: dict) -> dict:
    """The recipe as the engine resolved it (its lr after scaling, warm-up, batch...)."""
    sections, home = run_json.get("config", {}), section_of()  # run.json keeps the settings by section
    keys = ("batch_size", "opt", "lr", "lr_scaling", "lr_schedule", "lr_peak_epoch", "warmup_epochs", "epochs",
            "momentum", "weight_decay", "no_bn_wd", "label_smoothing", "train_crop_scale", "zero_init_residual",
            "model_ema", "model_ema_steps", "model_ema_decay", "eval_every", "workers", "data_backend", "seed")
    return {**{k: sections.get(home[k], {}).get(k) for k in keys}, "scaled_lr": run_json.get("lr"),
            "global_batch": run_json.get("global_batch")}


def _flag_value(flag: str, default: int) -> int:
    return int(RECIPE_FLAGS[RECIPE_FLAGS.index(flag) + 1]) if flag in RECIPE_FLAGS else default


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


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
