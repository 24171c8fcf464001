"""The time-to-accuracy protocol's arithmetic over its records: which runs count, the target and the
budget they fix, each run measured against them from its curve, and medians with ranges.

A run counts when it follows the protocol (its point names the protocol version), finished, the
machine was otherwise quiet (``metrics.counted``, from ``other_cpu_share``) and its code was its commit's
(:func:`clean_tree`); an engine run counts only under the engine's current recipe (its newest run's) and
when it was scored as main.py is (the same validation resize: :func:`one_scoring`). From the protocol round
(``PROTOCOL`` 3) on, a run counts only when it also keeps the round's rules (:func:`round_rules_broken`): seeded,
its boot named, its code clean and digested, main.py's version known and main.py at its own defaults, both
programs with main.py's loader workers. The rules of a whole round (alternation, one boot, 3 + 3) are
:mod:`studies.fashion_mnist_race.headline`'s. Records of the versions before (``HISTORY``) are the write-up's history.

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

from hpc_imagenet.harness.core.kinds import Record

KIND = "time_to_accuracy"
TUNING_KIND = "tta_tuning"
PROTOCOL = 3  # the protocol round: runs made by ``run --phase round`` under every rule of item 1 of the protocol
HISTORY = (2,)  # the versions before: shown in the write-up as history, never the headline
EXAMPLES_PROGRAM = "pytorch/examples imagenet/main.py"
OURS_PROGRAM = "hpc-imagenet"
NAMES = {EXAMPLES_PROGRAM: "main.py", OURS_PROGRAM: "this engine"}  # as the write-up names them
GOAL_RATIO = 3.0  # the benchmark's goal: time to the target at least 3x shorter than main.py's
GOAL_TOP1 = 92.0  # ...and, in main.py's wall time, at least this top-1 (the table's ResNet18: 94.9 %)
MIN_RUNS = 3  # counted runs of each program before the medians are the benchmark's result
LOADER_WORKERS = 4  # main.py's default -j, given to both programs alike
EXAMPLES_EPOCHS = 10  # main.py's epochs under the protocol (its own default, 90, is ImageNet's)


def protocol_runs(recs: Sequence[Record], program: str, version: int = PROTOCOL) -> List[Record]:
    """PROGRAM's ok records of protocol VERSION, counted or not, oldest first."""
    return sorted((r for r in recs if r.kind == KIND and r.ok and r.point.protocol == version
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
    that ignores what the harness writes (hpc_imagenet.imagenet.run.sysinfo.HARNESS_OUTPUTS), so ``-dirty`` there means
    changed code, and such a run does not count. Older records set the flag for the sweep's own records file
    too; their engine sources were audited against their commits instead (docs/time-to-accuracy.md)."""
    return not (run.environment.machine_id and (run.environment.git_commit or "").endswith("-dirty"))


def counted(runs: Sequence[Record]) -> List[Record]:
    """One program's runs that count: quiet, scored as main.py is, of its current recipe (the newest run's: a
    retuned recipe starts its count again, and the runs of the recipes before it stay on record, uncounted),
    and from the protocol round on, keeping the round's rules for one run (:func:`round_rules_broken`)."""
    return [r for r in runs if counts(r, superseded(r, runs))]


def counts(run: Record, superseded_recipe: bool) -> bool:
    """The rule :func:`counted` applies to one run, for a table that shows every run."""
    return not why_not_counted(run, superseded_recipe)


def why_not_counted(run: Record, superseded_recipe: bool) -> List[str]:
    """Why RUN does not count, one phrase a reason (none: it counts)."""
    share = run.metrics.other_cpu_share
    reasons = [] if run.metrics.counted else [f"others used {fmt_share(share)} of the CPU"]
    reasons += [] if one_scoring(run) else [f"validated at resize {validation_resize(run)}"]
    reasons += ["an earlier recipe"] if superseded_recipe else []
    if (run.point.protocol or 0) >= PROTOCOL:
        return reasons + round_rules_broken(run)  # its dirty tree among them
    return reasons + ([] if clean_tree(run) else ["changed code"])


def fmt_share(share: Optional[float]) -> str:
    return "an unmeasured share" if share is None else f"{100 * share:.0f} %"


def round_rules_broken(run: Record) -> List[str]:
    """The protocol round's rules RUN breaks, one phrase each: a run of the round is seeded, names its boot, ran
    from a clean tree with its source digest, and ran with main.py's loader workers; main.py's runs name its version
    and give it nothing but the protocol's epochs and the seed."""
    env, point = run.environment, run.point
    broken = [] if point.seed is not None else ["unseeded"]
    broken += [] if env.machine_id else ["no machine id (boot)"]
    broken += [f"dirty tree ({env.git_commit})"] if (env.git_commit or "").endswith("-dirty") else []
    broken += [] if env.source_digest else ["no source digest"]
    workers = (point.recipe or {}).get("workers")
    broken += [] if workers == LOADER_WORKERS else [f"{workers} loader workers, not {LOADER_WORKERS}"]
    if point.program == EXAMPLES_PROGRAM:
        broken += [] if point.examples_commit or point.examples_main_digest else ["main.py's version unknown"]
        broken += [] if at_defaults(point.examples_flags) else \
            [f"main.py not at its defaults (given {' '.join(point.examples_flags or ['nothing recorded'])})"]
    return broken


def at_defaults(flags: Optional[Sequence[str]]) -> bool:
    """Whether FLAGS, main.py's command line after its data folder, leave it at its defaults: the protocol's
    ``--epochs`` and a ``--seed``, nothing else (None: not recorded, unknown)."""
    if flags is None:
        return False
    given = dict(zip(flags[::2], flags[1::2]))
    return len(flags) == 4 and given.keys() == {"--epochs", "--seed"} and given["--epochs"] == str(EXAMPLES_EPOCHS)


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
    # the engine's default (hpc_imagenet/imagenet/data/decode/base.py's val_resize) restated: that module's package
    # imports
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


def spreads(counted_runs: Sequence[Record], fixed: Goal) -> dict:
    """One program's counted runs against the final target and budget: time to the target in wall and CPU seconds,
    how many missed it, the best top-1 within the budget and the start, each as a :class:`Spread`."""
    measured = [measure(r, fixed.target, fixed.budget_s) for r in counted_runs]
    to = [to_target(r, m) for r, m in zip(counted_runs, measured)]
    return {"wall": Spread.of([wall for wall, _ in to]), "cpu": Spread.of([cpu for _, cpu in to]),
            "missed": sum(m.time_to_target_s is None for m in measured),
            "best": Spread.of([m.best_in_budget for m in measured]),
            "start": Spread.of([r.metrics.start_s for r in counted_runs])}
