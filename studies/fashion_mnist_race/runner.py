"""``python -m studies.fashion_mnist_race run``: time to a target top-1 on real photographs,
pytorch/examples' ``main.py`` against this project's engine with its own recipe, under one protocol
(docs/time-to-accuracy.md; modelled on MLPerf's rules):

- **Two splits, never mixed** (:mod:`studies.fashion_mnist_race.fashion_mnist`): every recipe decision is made on
  the ``tuning`` split (a held-out tenth of the training photographs; phase ``tune``, records of kind
  ``tta_tuning``); the test photographs are read only by the counted runs (phases ``examples`` and
  ``ours``). The recipe's records say what it was tuned on (``tuned_on``).
- **One scoring**: both programs are scored main.py's way (resize to size x 256/224, centre crop).
- **One declared model**: the engine's recipe names the weights it is scored on (``DECLARED``), the
  same at every evaluation; the engine evaluates only those.
- **Repeated, quiet runs**: each run has a seed; it counts only when other processes used at most
  ``--quiet-share`` (10 %) of the machine's CPU time meanwhile (``other_cpu_share``); a run that does
  not count is recorded all the same and shown as such.
- **Target and budget fixed before the engine runs**: main.py's median best top-1 and median wall
  time over its counted runs so far (each engine run records the pair it ran against; the report
  measures every run against the final medians from its curve).

Each run appends one record: the curve (top-1 after each evaluation against wall time since the
start, evaluation included, with the CPU seconds of the process tree), the time from the start to
the first training step (``start_s``), time and CPU seconds to the target, the recipe, the seed and
the machine's load while it ran.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from hpc_imagenet.imagenet.config import section_of
from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.imagenet.train import checkpoint
from hpc_imagenet.imagenet.train.time_to_accuracy import FIRST_STEP_LINE
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record, from_dict
from hpc_imagenet.harness.core.records import RESULTS_DIR, SCRATCH_DIR
from hpc_imagenet.harness.runners.common import BenchError, last_line, new_sweep
from studies.fashion_mnist_race import examples_main, fashion_mnist
from studies.fashion_mnist_race.recipe import DECLARED, GPU_TUNED_ON_NOTE, RECIPES, TUNED_ON
from studies.fashion_mnist_race import protocol as tta_protocol
from studies.fashion_mnist_race.follow import PROGRESS_EVERY_S, QUIET_SHARE, Followed, Moment, follow
from studies.fashion_mnist_race.protocol import (EXAMPLES_EPOCHS, EXAMPLES_PROGRAM, KIND, OURS_PROGRAM, PROTOCOL,
                                                 TUNING_KIND)

log = logging.getLogger(__name__)

DEFAULT_TAG = "tta"
# 32 px, not the photos' 28: a multiple of ResNet's total stride (32), so every stage halves the
# feature map evenly down to 1x1 (28 px rounds at three stages), and the size the first manual
# trials of both programs used, so their timings carry over. It costs (32/28)^2 = 1.3x the compute.
IMAGE_SIZE = 32
REPO = RESULTS_DIR.parent
ENGINE = REPO / "imagenet" / "imagenet_ddp.py"
BOUND = 2.0  # the ours run is stopped past this multiple of main.py's wall time (it stops itself at 1x)...
START_ALLOWANCE_S = 120.0  # ...plus its start (imports, the data scan), which its budget does not count
# one line per evaluation; "(ema)" after it when the run is scored on the EMA of the weights
ENGINE_EPOCH = re.compile(r"^ \* Epoch (\d+): val top1 ([\d.]+)\s+top5 ([\d.]+).*?(?:\((ema)\))?\s*$")
ENGINE_PROGRESS = re.compile(r"^Epoch: \[")
EXAMPLES_NOTE = ("main.py's step decay (LR x0.1 every 30 epochs) does not fire within 10 epochs: its LR "
                 "stays 0.1 throughout")


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common],
                       help="time to a target top-1 on Fashion-MNIST: pytorch/examples main.py vs this engine")
    p.add_argument("--phase", choices=("round", "examples", "ours", "both", "tune", "pick"), default="both",
                   help="round: the protocol round in one go, the only runs the headline is taken from (--tune's "
                        "trials on the tuning split first, then --pairs pairs of main.py and this engine, "
                        "alternating, seeds --seed on, each from a clean tree); examples: main.py's 10 epochs on "
                        "the test split (its counted runs set the target and the budget); ours: this engine "
                        "against them; both: one after the other, same seed; tune: this engine on the tuning "
                        "split (held-out training photographs), with --trial's flags on top of the recipe; pick: "
                        "print the --trial of this machine's tuning runs of the recipe that scored best within "
                        "--within-s")
    p.add_argument("--pairs", type=int, default=tta_protocol.MIN_RUNS, metavar="N", help="round: pairs of runs, "
                   f"main.py then the engine, seeds --seed to --seed + N - 1 (default {tta_protocol.MIN_RUNS})")
    p.add_argument("--tune", action="append", default=[], metavar="FLAGS", help="round: a trial run on the tuning "
                   "split before the counted runs (repeat for more; \"\" is the recipe as it is); the gpu recipe's "
                   "counted runs take the one that scored best within --within-s")
    p.add_argument("--recipe", choices=tuple(RECIPES), help="the engine's recipe: cpu (tuned on 2 cores) or gpu "
                   "(default: gpu where torch sees a CUDA GPU); the gpu recipe's counted runs take the --trial "
                   "that phase pick chose on this machine's tuning split")
    p.add_argument("--within-s", type=float, metavar="S", help="pick: the wall time on the test split to score "
                   "trials within (default: this machine's main.py budget), scaled to the tuning split's size")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (both programs' --seed); each counted "
                   "run of a program takes another")
    p.add_argument("--trial", default="", metavar="FLAGS", help="tune: engine flags tried on top of the recipe "
                   "(e.g. \"--wd 5e-4 --epochs 4\")")
    p.add_argument("--workers", type=int, metavar="N", help="loader workers of both programs outside a round "
                   f"(default: main.py's own, {tta_protocol.LOADER_WORKERS}, which the recipe passes too); a run given "
                   "another number does not count")
    p.add_argument("--unseeded-examples", action="store_true", help="run main.py without --seed: on a GPU its "
                   "--seed also turns on cuDNN's deterministic mode, which slows it (recorded as seed null)")
    p.add_argument("--quiet-share", type=float, default=QUIET_SHARE, help="a run counts when other processes "
                   "used at most this share of the machine's CPU time meanwhile (default 0.10)")
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
    p.add_argument("--keep-checkpoints", action="store_true", help="keep the engine's checkpoints in its run "
                   "folder (by default they go once the run has ended: ~0.5 GB a run that no record reads)")


def run(args: argparse.Namespace) -> List[dict]:
    """One phase (``round`` is :mod:`studies.fashion_mnist_race.protocol_round`'s, above the phases)."""
    args.recipe = args.recipe or default_recipe()
    if args.phase == "pick":  # reads the records alone
        print(shlex.join(pick_trial(args)), flush=True)
        return []
    data = data_for(args, "tuning" if args.phase == "tune" else "test")
    if args.phase == "tune":
        return [run_tuning(args, data)]
    out: List[dict] = []
    if args.phase in ("examples", "both"):  # main.py first: its run is among those that set the engine's target
        out.append(run_examples(args, data))
    if args.phase in ("ours", "both"):
        out.append(run_ours(args, data))
    return out


def data_for(args: argparse.Namespace, split: str) -> Path:
    """The ImageFolder whose val/ holds SPLIT (converted once, reused after)."""
    data = fashion_mnist.convert(args.fashion_mnist, args.cache, args.train_per_class, args.val_per_class, split)
    log.info("data: %s (%s split; %s)", data, split, ", ".join(fashion_mnist.classes_of(data)))
    return data


def scoring_flags(image_size: int) -> List[str]:
    """The engine's validation as main.py's: resize the short side to int(size x 256/224), then centre-crop
    SIZE. Passed, not left to the engine's default, which rounds (37 at 32 px, where main.py resizes to 36)."""
    return ["--val-resize-size", str(tta_protocol.examples_resize(image_size)), "--val-crop-size", str(image_size)]


def _point(program: str, data: Path, args: argparse.Namespace, **fields) -> dict:
    """A run's point; main.py's version (where --examples names it) and the round (where it runs in one) on every
    run's."""
    examples = {} if args.examples is None else {"examples_commit": _commit(args.examples),
                                                  "examples_main_digest": examples_main.digest(args.examples)}
    return {"program": program, "arch": "resnet18", "data": data.name, "image_size": args.image_size,
            "train_images": fashion_mnist.counts_of(data)["train"], "split": fashion_mnist.val_split_of(data),
            "seed": args.seed, "protocol": PROTOCOL, "workers": args.workers, "round": getattr(args, "round", None),
            **examples, **fields}


def scoring(resize: Optional[int], crop: Optional[int]) -> str:
    """The record's words for how a run was validated, from what that run was given (not from the protocol's
    intent: a record written at another resize says so)."""
    return f"resize {resize if resize is not None else 'the default'}, centre crop {crop}"


def _record(sweep: records.Sweep, point: dict, metrics: dict, followed: Followed, curve: List[dict], program: str,
            kind: str = KIND, **extra) -> dict:
    """The phase's record with its CURVE, appended; failed (no metrics) when PROGRAM exited with an error or
    left no curve."""
    error = None if followed.returncode == 0 and curve else \
        f"{program} exited {followed.returncode}: {last_line(chr(10).join(followed.tail))}"
    rec = sweep.add(point, {} if error else metrics, "failed" if error else "ok", error, kind=kind, curve=curve,
                    **extra)
    _say(rec)
    return rec


def _require_split(data: Path, split: str, phase: str) -> None:
    """BenchError unless DATA's val/ holds SPLIT: tuning never scores on the test photographs, and a
    counted run never on the held-out ones."""
    found = fashion_mnist.val_split_of(data)
    if found != split:
        raise BenchError(f"the {phase} phase scores on the {split} split, but {data} holds the {found} split; "
                         f"let the benchmark convert the data (--cache DIR) instead of pointing it at another folder")


# ---------------------------------------------------------------- phase: examples

def run_examples(args: argparse.Namespace, data: Path) -> dict:
    if args.examples is None:
        raise BenchError("the examples phase needs --examples DIR, a pytorch/examples checkout "
                         "(git clone https://github.com/pytorch/examples DIR)")
    _require_split(data, "test", "examples")
    sweep = new_sweep("examples", args)
    log_file = args.work / sweep.id / "main.log"
    seed = None if args.unseeded_examples else args.seed
    log.info("examples: main.py for %d epochs at %d px, %s; every line in %s", args.examples_epochs,
             args.image_size, "unseeded" if seed is None else f"seed {seed}", log_file)
    lines, followed = examples_main.run(args.examples, data, args.image_size, args.examples_epochs, log_file,
                                        timeout_s=args.timeout_minutes * 60, seed=seed, workers=args.workers)
    recipe = {**examples_main.DEFAULTS, **({"workers": args.workers} if args.workers is not None else {})}
    sizes = examples_main.size_replacements(args.image_size)
    point = _point(EXAMPLES_PROGRAM, data, args, epochs_planned=args.examples_epochs, seed=seed, eval_every=1,
                   examples_flags=examples_main.flags(args.examples_epochs, seed, args.workers), recipe=recipe,
                   changed_in_copy=[f"{old} -> {new}" for old, new in sizes],
                   scoring=scoring(*examples_main.validation_sizes(sizes)))
    best = max((p["top1"] for p in lines.curve), default=0.0)
    metrics = tta_metrics(lines.curve, best, followed, point["train_images"], lines.eval_s, 1, lines.start_s,
                          args.quiet_share)
    return _record(sweep, point, metrics, followed, lines.curve, "main.py", notes=[EXAMPLES_NOTE], log=str(log_file))


# ---------------------------------------------------------------- phase: ours

def run_ours(args: argparse.Namespace, data: Path) -> dict:
    _require_split(data, "test", "ours")
    target, budget_s, runs = protocol_target(args.records, data.name, args.image_size,
                                             round_id=getattr(args, "round", None))
    tried = _tuning_runs(args) if args.recipe == "gpu" else []  # the records file read once for both uses
    trial = counted_trial(args, tried)
    flags = [*RECIPES[args.recipe], *scoring_flags(args.image_size), *trial]
    log.info("ours: seed %d, target %.2f %% top-1 and budget %.0f s (main.py's medians over %d counted runs); "
             "recipe %s", args.seed, target, budget_s, len(runs), " ".join(flags))
    sweep, lines, followed, run_json, log_file = _engine_run(
        args, "ours", data, flags, BOUND * budget_s + START_ALLOWANCE_S,
        "--desired-acc", f"{target:.3f}", "--time-budget-minutes", f"{budget_s / 60:.3f}")
    engine_tta, settings = run_json.get("time_to_accuracy") or {}, _settings(run_json)
    metrics = tta_metrics(lines.curve, target, followed, fashion_mnist.counts_of(data)["train"],
                          engine_tta.get("eval_s", 0.0), settings["eval_every"], lines.start_s, args.quiet_share)
    metrics.update(budget_s=round(budget_s, 2), best_top1_in_budget=tta_protocol.best_within(lines.curve, budget_s),
                   images_seen=sum(e.get("train_samples", 0) for e in run_json.get("epochs", [])) or None)
    point = _point(OURS_PROGRAM, data, args, recipe_flags=flags, recipe=settings, declared=DECLARED,
                   tuned_on=tuned_on(args, trial, tried), target_from=[r.sweep for r in runs], recipe_name=args.recipe,
                   scoring=scoring(settings["val_resize_size"], settings["val_crop_size"]))
    return _record(sweep, point, metrics, followed, lines.curve, "the engine", engine_time_to_accuracy=engine_tta,
                   engine_status=run_json.get("status"), engine_startup=run_json.get("startup"), log=str(log_file))


# ---------------------------------------------------------------- phase: tune

def run_tuning(args: argparse.Namespace, data: Path) -> dict:
    """The recipe with --trial's flags on top, on the tuning split: a tta_tuning record (not a
    benchmark run: no target, no budget, never read as one)."""
    _require_split(data, "tuning", "tune")
    trial = shlex.split(args.trial)
    flags = [*RECIPES[args.recipe], *scoring_flags(args.image_size), *trial]
    log.info("tune: seed %d, %s recipe, trial %s on the tuning split", args.seed, args.recipe,
             args.trial or "(the recipe as it is)")
    sweep, lines, followed, run_json, log_file = _engine_run(args, "tune", data, flags, args.timeout_minutes * 60)
    settings = _settings(run_json)  # as the engine resolved them: a trial's own --eval-every included
    metrics = tta_metrics(lines.curve, 0.0, followed, fashion_mnist.counts_of(data)["train"], 0.0,
                          settings["eval_every"], lines.start_s, args.quiet_share)
    metrics["final_top1"] = lines.curve[-1]["top1"] if lines.curve else None
    point = _point(OURS_PROGRAM, data, args, trial=trial, recipe_flags=flags, recipe=settings, recipe_name=args.recipe,
                   scoring=scoring(settings["val_resize_size"], settings["val_crop_size"]))
    return _record(sweep, point, metrics, followed, lines.curve, "the engine", TUNING_KIND,
                   engine_startup=run_json.get("startup"), log=str(log_file))


def default_recipe() -> str:
    """gpu where torch sees a CUDA GPU, else cpu."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def _tuning_runs(args: argparse.Namespace) -> List[Record]:
    """This machine's ok tuning records of ARGS' recipe, oldest first."""
    recs = records.load_typed([args.records])[0] if Path(args.records).exists() else []
    here = sysinfo.machine_id()
    return sorted((r for r in recs if r.kind == TUNING_KIND and r.ok and r.environment.machine_id == here
                   and (r.point.recipe_name or "cpu") == args.recipe), key=lambda r: r.time)


def pick_trial(args: argparse.Namespace) -> List[str]:
    """The --trial of this machine's tuning run of the recipe with the best top-1 within --within-s (default:
    this machine's main.py budget), scaled from the test split's training photographs to the tuning split's."""
    tried = _tuning_runs(args)
    if not tried:
        raise BenchError(f"no tuning run of the {args.recipe} recipe on this machine in {args.records}: run "
                         "--phase tune (with --trial FLAGS) first")
    test_data = fashion_mnist.cache_name(args.train_per_class, args.val_per_class, "test")
    within = args.within_s or protocol_target(args.records, test_data, args.image_size)[1]
    scaled = within * (1 - fashion_mnist.HELD_OUT)  # the tuning split trains on the other nine tenths
    scores = {r.sweep: tta_protocol.best_within(r.curve or [], scaled) or 0.0 for r in tried}
    best = max(tried, key=lambda r: scores[r.sweep])
    log.info("pick: %s scored %s %% within %.0f s on the tuning split (%.0f s on the test split), best of %d",
             shlex.join(best.point.trial or []) or "(the recipe)", scores[best.sweep], scaled, within, len(tried))
    return list(best.point.trial or [])


def counted_trial(args: argparse.Namespace, tried: Optional[List[Record]] = None) -> List[str]:
    """The --trial a counted run of the recipe takes: none for the cpu recipe (its values are the recipe); for
    the gpu recipe, tuned on this machine first, one that this machine's tuning split has seen (so that nothing
    is tuned on the test split). TRIED: this machine's tuning runs of the recipe, where already read."""
    trial = shlex.split(args.trial)
    tried = _tuning_runs(args) if tried is None and args.recipe == "gpu" else tried
    if args.recipe == "gpu" and not tried:
        raise BenchError("the gpu recipe has not been tuned on this machine: run --phase tune --recipe gpu with "
                         "its trials first, then --phase pick (results/gpu_session.sh ttagpu does all three)")
    if not trial:
        return []
    if args.recipe != "gpu":
        raise BenchError("--trial on a counted run changes the recipe: tune on the tuning split (--phase tune), "
                         "then change RECIPE_FLAGS (recipe.py), or use --recipe gpu, whose count takes a picked trial")
    if trial not in [list(r.point.trial or []) for r in tried or []]:
        raise BenchError(f"--trial {args.trial!r} was not tried on this machine's tuning split; run --phase tune "
                         "with it first, then --phase pick")
    return trial


def tuned_on(args: argparse.Namespace, trial: List[str], tried: Optional[List[Record]] = None) -> dict:
    """What the counted run's recipe was chosen on: the cpu recipe's records and decisions, or for the gpu recipe
    this machine's tuning runs of it and the rule that picked TRIAL from them."""
    if args.recipe == "cpu":
        return TUNED_ON
    return {"split": "tuning", "held_out": fashion_mnist.held_out_note(),
            "records": [r.sweep for r in (_tuning_runs(args) if tried is None else tried)],
            "decisions": [f"{GPU_TUNED_ON_NOTE}: {shlex.join(trial) or '(the recipe as it is)'}"]}


def _engine_run(args: argparse.Namespace, phase: str, data: Path, flags: List[str], timeout_s: float,
                *more: str) -> Tuple[records.Sweep, "EngineLines", Followed, dict, Path]:
    """The engine on DATA with FLAGS (then MORE), watched: its sweep, its lines, what it cost, its
    run.json and its log file."""
    sweep = new_sweep(phase, args)
    run_dir = args.work / sweep.id / "run"
    cmd = [sys.executable, "-u", str(ENGINE), str(data), "--image-size", str(args.image_size), *flags,
           "--seed", str(args.seed), *(["-j", str(args.workers)] if args.workers is not None else []), *more,
           "--log-dir", str(run_dir)]
    lines = EngineLines()
    followed = follow(cmd, REPO, run_dir.parent / "engine.log", lines, timeout_s=timeout_s)
    if not args.keep_checkpoints:  # no record reads them; main.py's go with its temporary folder
        checkpoint.remove_all(run_dir)
    return sweep, lines, followed, _read_json(run_dir / "run.json"), run_dir.parent / "engine.log"


class EngineLines:
    """The curve read from the engine's per-epoch lines as they arrive, and when its first training
    step ended (its first progress line)."""

    def __init__(self) -> None:
        self.curve: List[dict] = []
        self.start_s: Optional[float] = None
        self._last_progress = 0.0

    def __call__(self, moment: Moment, line: str) -> None:
        now = moment.wall_s
        row = ENGINE_EPOCH.match(line)
        if row:
            point = {"epoch": int(row.group(1)) + 1, "wall_s": round(now, 2), "core_s": round(moment.cpu_s(), 2),
                     "top1": float(row.group(2)), "top5": float(row.group(3)), "weights": row.group(4) or "model"}
            self.curve.append(point)
            log.info("ours: epoch %d top-1 %.2f %% (%s) at %.0f s", point["epoch"], point["top1"], point["weights"],
                     now)
        elif line.startswith(FIRST_STEP_LINE) and self.start_s is None:
            self.start_s = round(now, 2)
        elif ENGINE_PROGRESS.match(line) and now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            log.info("ours: %s (%.0f s)", line.strip()[:60], now)


def protocol_target(path: Path, data: str, image_size: int, machine_id: Optional[str] = None,
                    round_id: Optional[str] = None) -> Tuple[float, float, List[Record]]:
    """(target, budget_s, runs): main.py's median best top-1 and median wall time over its counted
    runs on DATA at IMAGE_SIZE in PATH so far on this machine (MACHINE_ID: this boot's, by default), and
    those runs: another machine's times say nothing of this one's. In a round (ROUND_ID), that round's alone."""
    machine_id = machine_id or sysinfo.machine_id()
    recs = records.load_typed([path])[0] if Path(path).exists() else []
    runs = [r for r in tta_protocol.counted(tta_protocol.protocol_runs(recs, EXAMPLES_PROGRAM))
            if r.point.data == data and r.point.image_size == image_size and r.environment.machine_id == machine_id
            and (round_id is None or r.point.round == round_id)]
    fixed = tta_protocol.goal(runs)
    if fixed is None:
        raise BenchError(f"no counted examples run for {data} at {image_size} px on this machine (boot {machine_id}) "
                         f"in {path}: run --phase both (main.py then the engine, alternating) or --phase examples "
                         "first, on a quiet machine (its counted runs set this machine's target and time budget)")
    return fixed.target, fixed.budget_s, runs


def tta_metrics(curve: List[dict], target: float, followed: Followed, train_images: int, eval_s: float,
                eval_every: int, start_s: Optional[float] = None, quiet_share: float = QUIET_SHARE) -> dict:
    """The numbers of a time_to_accuracy record from its curve (top-1 in %, wall_s since the start)."""
    reached = next((p for p in curve if p["top1"] >= target), None)
    epochs = curve[-1]["epoch"] if curve else 0
    return {"target_top1": target, "time_to_target_s": reached["wall_s"] if reached else None,
            "epochs_to_target": reached["epoch"] if reached else None,
            "core_s_to_target": reached.get("core_s") if reached else None,
            "best_top1": max((p["top1"] for p in curve), default=0.0), "wall_s": round(followed.wall_s, 2),
            "core_s": round(followed.core_s, 2), "epochs": epochs, "images_seen": epochs * train_images,
            "eval_s": round(eval_s, 2), "eval_every": eval_every, "start_s": start_s, **followed.load,
            "counted": (followed.load["other_cpu_share"] or 0.0) <= quiet_share
            and followed.load["other_cpu_share"] is not None}  # unmeasured: not counted


def _settings(run_json: dict) -> dict:
    """The recipe as the engine resolved it (its lr after scaling, warm-up, batch...)."""
    sections, home = run_json.get("config", {}), section_of()  # run.json keeps the settings by section
    keys = ("batch_size", "opt", "lr", "lr_scaling", "lr_schedule", "lr_peak_epoch", "warmup_epochs", "epochs",
            "momentum", "weight_decay", "no_bn_wd", "label_smoothing", "train_crop_scale", "train_crop_ratio",
            "zero_init_residual", "model_ema", "model_ema_steps", "model_ema_decay", "eval_every", "val_resize_size",
            "val_crop_size", "workers", "data_backend", "seed")
    return {**{k: sections.get(home[k], {}).get(k) for k in keys}, "scaled_lr": run_json.get("lr"),
            "global_batch": run_json.get("global_batch")}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _commit(checkout: Path) -> Optional[str]:
    """CHECKOUT's own commit; None where it is no git checkout of its own (a copy without .git inside another
    repository: git would walk up and name that one's commit, as the first GPU records did)."""
    try:
        top = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return top[1] if len(top) == 2 and Path(top[0]).resolve() == Path(checkout).resolve() else None


def _say(written: dict) -> None:
    rec = from_dict(written)
    m = rec.metrics
    if not rec.ok:
        log.info("%s: failed: %s", rec.point.program, rec.error)
        return
    if rec.kind == TUNING_KIND:
        log.info("tune: trial %s: best top-1 %.2f %%, final %.2f %% after %d epochs on the tuning split; %.0f s wall",
                 " ".join(rec.point.trial) or "(the recipe)", m.best_top1, m.final_top1, m.epochs, m.wall_s)
        return
    log.info("%s: best top-1 %.2f %% after %d epochs, target %.2f %% reached at %s s; %.0f s wall, %.0f CPU s%s",
             rec.point.program, m.best_top1, m.epochs, m.target_top1, m.time_to_target_s, m.wall_s, m.core_s,
             "" if m.counted else f" (not counted: others used {100 * (m.other_cpu_share or 0):.0f} % of the CPU)")
