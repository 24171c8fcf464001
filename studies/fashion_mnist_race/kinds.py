"""The race's record kinds, declared with the harness: ``time_to_accuracy`` (a run of the protocol) and
``tta_tuning`` (a recipe trial on the tuning split, not a benchmark), one point, metrics and units for both."""
# No ``from __future__ import annotations``: the harness reads the evaluated Annotated markers.
from dataclasses import dataclass
from typing import Optional

from hpc_imagenet.harness.core.kinds import Req, Text, Value
from hpc_imagenet.harness.core.registry import Kind, declare


@dataclass(frozen=True)
class TimeToAccuracyPoint:
    """A run of the time-to-accuracy benchmark (studies.fashion_mnist_race.runner); ``protocol`` absent: a run made
    before the protocol."""

    program: Text = None
    arch: Text = None
    data: Text = None
    image_size: Optional[int] = None
    train_images: Optional[int] = None
    split: Text = None  # what val/ held: test or tuning
    seed: Optional[int] = None  # None: main.py run unseeded
    protocol: Optional[int] = None
    scoring: Text = None
    workers: Optional[int] = None
    declared: Text = None  # the weights the engine was scored on
    tuned_on: Value = None
    target_from: Value = None  # the examples sweeps that fixed the target and budget
    trial: Value = None  # a tuning trial's flags
    recipe: Value = None
    recipe_flags: Value = None
    recipe_name: Text = None  # the engine's recipe: cpu or gpu (records before the gpu recipe: cpu)
    epochs_planned: Optional[int] = None
    examples_commit: Text = None
    examples_main_digest: Text = None  # main.py's SHA-256 (12 digits): its version where no git history came along
    examples_flags: Value = None  # main.py's command line after its data folder (the protocol round's records on)
    round: Text = None  # the protocol round the run belongs to (``run --phase round``), None outside one
    changed_in_copy: Value = None
    gpus: Optional[int] = None
    processes: Optional[int] = None
    setup: Text = None
    variant: Text = None

@dataclass(frozen=True)
class TimeToAccuracyMetrics:
    """time_to_target_s (and epochs_/core_s_to_target) are None when the target was not reached."""

    target_top1: Req = None
    best_top1: Req = None
    wall_s: Req = None
    core_s: Req = None
    epochs: Req = None
    eval_every: Req = None
    time_to_target_s: Optional[float] = None
    epochs_to_target: Optional[float] = None
    core_s_to_target: Optional[float] = None
    best_top1_in_budget: Optional[float] = None
    budget_s: Optional[float] = None
    final_top1: Optional[float] = None  # a tuning trial's last evaluation
    images_seen: Optional[int] = None
    eval_s: Optional[float] = None
    start_s: Optional[float] = None  # from the start to the end of the first training step
    other_cpu_share: Optional[float] = None
    counted: Optional[bool] = None  # the machine was otherwise quiet
    world_size: Optional[int] = None
    load_1m_mean: Optional[float] = None
    load_1m_max: Optional[float] = None
    cores: Optional[int] = None


# The units of the race's own metric names (the others are the harness's); a run's records carry them.
UNITS = {
    "time_to_target_s": "s (wall, evaluation included)", "core_s": "CPU s (user + system, the whole process tree)",
    "core_s_to_target": "CPU s (user + system, the whole process tree, at the evaluation that reached it)",
    "budget_s": "s (main.py's wall time)", "images_seen": "images", "eval_s": "s (evaluation wall time, counted in)",
    "device_hours": "GPU hours (wall x GPUs)", "samples": "samples",
}

TIME_TO_ACCURACY = declare(Kind("time_to_accuracy", TimeToAccuracyPoint, TimeToAccuracyMetrics, units=UNITS))
TTA_TUNING = declare(Kind("tta_tuning", TimeToAccuracyPoint, TimeToAccuracyMetrics, units=UNITS))
