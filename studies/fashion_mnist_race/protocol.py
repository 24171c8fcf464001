"""The time-to-accuracy protocol's arithmetic over its records: which runs count, the target and the
budget they fix, each run measured against them from its curve, and medians with ranges.

A run counts when it follows the protocol (its point names the protocol version), finished, the
machine was otherwise quiet (``metrics.counted``, from ``other_cpu_share``) and its code was its commit's
(:func:`clean_tree`); an engine run counts only under the engine's current recipe (its newest run's) and
when it was scored as main.py is (the same validation resize: :func:`one_scoring`).

Times compare only within one machine (:func:`machine`: one boot of one machine, so two VMs of the same
size, or two leases of one GPU, are two machines): main.py's counted runs on a machine fix that
machine's target (their median best top-1) and budget (their median wall time). Each engine run ran
against the target and budget known when it started; it is measured here against its machine's final
ones, from its curve, so that every run is judged by the same numbers. A run that never reaches the
target counts at its full time (:func:`to_target`): leaving it out would favour the program that misses.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import List, Optional, Sequence

from results.core.kinds import Record

KIND = "time_to_accuracy"
TUNING_KIND = "tta_tuning"
PROTOCOL = 2
EXAMPLES_PROGRAM = "pytorch/examples imagenet/main.py"
OURS_PROGRAM = "hpc-imagenet"
MIN_RUNS = 3  # counted runs of each program before the medians are the benchmark's result


def protocol_runs(recs: Sequence[Record], program: str) -> List[Record]:
    """PROGRAM's ok protocol records, counted or not, oldest first."""
    return sorted((r for r in recs if r.kind == KIND and r.ok and r.point.protocol == PROTOCOL
                   and r.point.program == program), key=lambda r: r.time)


def hardware(run: Record) -> str:
    """What a run ran on, as a reader names it: its GPU's name, else its CPU core count."""
    return run.environment.gpu_name or f"{run.environment.cpu_count or '?'} CPU cores"


def machine(run: Record) -> str:
    """The machine a run's times belong to: its hardware and which boot of it (``machine_id``, a hash of the
    kernel's boot id). Records made before the boot was recorded are told apart by kernel build and day, the
    closest those records allow (every session of a day here ran on one VM)."""
    env = run.environment
    if env.machine_id:
        return f"{hardware(run)}, boot {env.machine_id}"
    kernel = (env.platform or "?").removeprefix("Linux-").split("-with-")[0]
    return f"{hardware(run)}, kernel {kernel}, {run.time[:10]}"


def clean_tree(run: Record) -> bool:
    """Whether RUN's code was its commit's. Records that name their machine's boot were made with a dirty flag
    that ignores what the harness writes (imagenet.run.sysinfo.HARNESS_OUTPUTS), so ``-dirty`` there means
    changed code, and such a run does not count. Older records set the flag for the sweep's own records file
    too; their engine sources were audited against their commits instead (docs/time-to-accuracy.md)."""
    return not (run.environment.machine_id and (run.environment.git_commit or "").endswith("-dirty"))


def counted(runs: Sequence[Record]) -> List[Record]:
    """One program's runs that count: quiet, scored as main.py is, and of its current recipe (the newest
    run's): a retuned recipe starts its count again, and the runs of the recipes before it stay on record,
    uncounted."""
    return [r for r in runs if counts(r, superseded(r, runs))]


def counts(run: Record, superseded_recipe: bool) -> bool:
    """The rule :func:`counted` applies to one run, for a table that shows every run."""
    return bool(run.metrics.counted) and one_scoring(run) and clean_tree(run) and not superseded_recipe


def examples_resize(image_size: int) -> int:
    """main.py's validation resize at IMAGE_SIZE: its Resize(256) before CenterCrop(224), scaled and truncated."""
    return int(image_size * 256 / 224)


def validation_resize(run: Record) -> int:
    """The short side RUN's validation resized to before its centre crop. An engine run resized to what its
    recipe passed (--val-resize-size), else to the engine's default, which rounds where main.py truncates
    (37 at 32 px, main.py 36)."""
    size = run.point.image_size
    if run.point.program == EXAMPLES_PROGRAM:
        return examples_resize(size)
    # the engine's default (imagenet/data/decode/base.py's val_resize) restated: that module's package imports
    # torch, which the report runs without
    return (run.point.recipe or {}).get("val_resize_size") or round(size * 256 / 224)


def one_scoring(run: Record) -> bool:
    """Whether RUN was scored as main.py is: the same validation resize (both centre-crop the image size)."""
    return validation_resize(run) == examples_resize(run.point.image_size)


def superseded(run: Record, runs: Sequence[Record]) -> bool:
    """Whether RUN's recipe is not the newest of RUNS' (main.py's runs name none: never superseded)."""
    newest = max(runs, key=lambda r: r.time)
    return run.point.recipe_flags != newest.point.recipe_flags


def earlier_runs(recs: Sequence[Record]) -> List[Record]:
    """The ok time_to_accuracy records made before the protocol (no protocol version)."""
    return [r for r in recs if r.kind == KIND and r.ok and r.point.protocol is None]


@dataclass(frozen=True)
class Spread:
    """Median and range of a set of values (None where there are none)."""

    median: Optional[float]
    low: Optional[float]
    high: Optional[float]
    n: int

    @classmethod
    def of(cls, values: Sequence[Optional[float]]) -> "Spread":
        known = [v for v in values if v is not None]
        if not known:
            return cls(None, None, None, 0)
        return cls(statistics.median(known), min(known), max(known), len(known))


@dataclass(frozen=True)
class Goal:
    """What main.py's counted runs fix: the target top-1 and the wall-time budget."""

    target: float
    budget_s: float
    runs: int


def goal(examples_counted: Sequence[Record]) -> Optional[Goal]:
    if not examples_counted:
        return None
    return Goal(statistics.median(r.metrics.best_top1 for r in examples_counted),
                statistics.median(r.metrics.wall_s for r in examples_counted), len(examples_counted))


@dataclass(frozen=True)
class Measured:
    """One run against the final target and budget, read from its curve."""

    time_to_target_s: Optional[float]
    core_s_to_target: Optional[float]
    best_in_budget: Optional[float]


def measure(run: Record, target: float, budget_s: float) -> Measured:
    curve = run.curve or []
    reached = next((p for p in curve if p["top1"] >= target), None)
    return Measured(reached["wall_s"] if reached else None, reached.get("core_s") if reached else None,
                    best_within(curve, budget_s))


def to_target(run: Record, measured: Measured) -> tuple:
    """(wall s, CPU s) RUN took to the target, its full wall and CPU time where it never reached it."""
    if measured.time_to_target_s is not None:
        return measured.time_to_target_s, measured.core_s_to_target
    return run.metrics.wall_s, run.metrics.core_s


def best_within(curve: Sequence[dict], budget_s: float) -> Optional[float]:
    """The best top-1 a curve reached by BUDGET_S wall seconds (None before its first point)."""
    return max((p["top1"] for p in curve if p["wall_s"] <= budget_s), default=None)


def ratio(slow: Optional[float], fast: Optional[float]) -> Optional[float]:
    return slow / fast if slow is not None and fast else None
