"""The race's write-up (``studies/fashion_mnist_race/RESULTS.md``), from the records of ``python -m
studies.fashion_mnist_race run``: pytorch/examples' main.py and this engine on Fashion-MNIST under the protocol of
docs/time-to-accuracy.md (the arithmetic: :mod:`studies.fashion_mnist_race.protocol`).

It opens with the headline (:mod:`studies.fashion_mnist_race.headline`: the newest protocol round that keeps every
rule, or that none does yet), then shows every run of the current protocol, counted or not, each measured against
its machine's final target and budget (the medians of main.py's counted runs there); the medians and ranges of the
counted runs with the goals' verdicts; the counted runs' curves; the runs of the protocol's earlier versions as
history, in the same form; the tuning trials that chose the recipe; and the single runs made before the protocol,
marked as such.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Sequence

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import group_by
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import fmt, md_table
from studies.fashion_mnist_race import HERE, RECORDS, REFERENCE, headline, protocol, words
from studies.fashion_mnist_race.protocol import (EXAMPLES_PROGRAM, GOAL_RATIO, GOAL_TOP1, NAMES, OURS_PROGRAM, Goal,
                                                 Spread)

HEADING = "Time to accuracy on real photographs (Fashion-MNIST)"


def section(recs: Sequence[Record], fig_dir: Path, ref_dir: Path = REFERENCE) -> str:
    current = _by_machine(recs, protocol.PROTOCOL)
    history = {version: _by_machine(recs, version) for version in protocol.HISTORY}
    tuning = [r for r in recs if r.kind == protocol.TUNING_KIND and r.ok]
    earlier = protocol.earlier_runs(recs)
    if not (current or any(history.values()) or tuning or earlier):
        return ""
    out = [f"## {HEADING}\n", words("time_to_accuracy.protocol") + "\n", headline.words(recs)]
    out += _machines(current, fig_dir) if current else ["No run of the protocol round yet.\n"]
    for version, machines in history.items():
        out += [words("time_to_accuracy.history", version=version) + "\n", *_machines(machines, fig_dir, "History: ")] \
            if machines else []
    out += [_tuning(tuning), _earlier(earlier), published_table(ref_dir)]
    return "\n".join(part for part in out if part)


def _by_machine(recs: Sequence[Record], version: int) -> dict:
    """Protocol VERSION's runs of both programs, by machine."""
    return group_by([r for program in NAMES for r in protocol.protocol_runs(recs, program, version)], protocol.machine)


def _machines(machines: dict, fig_dir: Path, prefix: str = "") -> list:
    """Each machine's section, then every machine of one kind pooled where there are several (PREFIX before each
    heading: the history's)."""
    out = [_machine(machine, runs, fig_dir, len(machines) > 1, prefix) for machine, runs in machines.items()]
    return out + [_pooled(hardware, runs, prefix) for hardware, runs in group_by(
        [r for runs in machines.values() for r in runs], protocol.hardware).items()
        if len({protocol.machine(r) for r in runs}) > 1]


def _machine(machine: str, recs: Sequence[Record], fig_dir: Path, titled: bool, prefix: str = "") -> str:
    """One machine's runs: a machine's times compare only with the same machine's."""
    runs = {program: [r for r in recs if r.point.program == program] for program in NAMES}
    fixed = protocol.goal(protocol.counted(runs[EXAMPLES_PROGRAM]))
    slug = re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")
    name = f"time_to_accuracy-{slug}.png" if titled else "time_to_accuracy.png"
    when = sorted({r.time[:10] for r in recs})
    dates = when[0] if len(when) == 1 else f"{when[0]} to {when[-1]}"
    named = machine if machine.endswith(dates) else f"{machine} ({dates})"  # older records' names hold the day
    parts = [f"### {prefix}On {named}\n" if titled else f"{prefix}On {named}.\n",
             _figure(runs, fixed, fig_dir / name), _runs_table(runs, fixed), _summary(runs, fixed)]
    return "\n".join(part for part in parts if part)


def _figure(runs: dict, fixed: Optional[Goal], path: Path) -> str:
    series = [{"label": f"{NAMES[program]} seed {r.point.seed}", "x": [p["wall_s"] / 60 for p in r.curve],
               "y": [p["top1"] for p in r.curve], "color": figures.palette(i), "alpha": 0.8}
              for i, program in enumerate(NAMES) for r in protocol.counted(runs[program])]
    if not series:
        return "No counted run yet (every run so far shared the machine): no figure.\n"
    size = next(r.point.image_size for program in NAMES for r in runs[program])
    title = f"ResNet-18 on Fashion-MNIST at {size} px: counted runs"
    fig = _plot(path, series, fixed and fixed.target, fixed and fixed.budget_s / 60, title)
    return f"![time to accuracy]({fig.relative_to(path.parent.parent).as_posix()})\n"


def _plot(path: Path, series: Sequence[figures.Series], target: Optional[float], budget_min: Optional[float],
                     title: str) -> Path:
    """Top-1 against wall minutes, one line per program, with the target and the time budget marked."""
    def marks(ax) -> None:
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:.2f} %")
        if budget_min is not None:
            ax.axvline(budget_min, color="grey", linestyle=":", linewidth=1, label=f"budget {budget_min:.1f} min")
    return figures.axes(path, series, title, "", "wall time since the start (minutes, evaluation included)",
                 "validation top-1 (%)", setup=marks)


RUNS_COLUMNS = ("program", "seed", "counted (other CPU)", "start (s)", "time to target (s)", "CPU s to target",
                "best top-1 in budget (%)", "best top-1 (%)", "epochs", "wall (s)", "scored on", "record")


def _runs_table(runs: dict, fixed: Optional[Goal]) -> str:
    rows = [_run_row(program, r, fixed, protocol.superseded(r, runs[program])) for program in NAMES
            for r in runs[program]]
    lead = (words("time_to_accuracy.target", target=fmt(fixed.target), budget=fmt(fixed.budget_s), runs=fixed.runs)
            if fixed else "No counted main.py run yet: no target, no budget.") + "\n\n"
    return lead + md_table(RUNS_COLUMNS, rows)


def _run_row(program: str, run: Record, fixed: Optional[Goal], superseded: bool) -> list:
    m = run.metrics
    measured = protocol.measure(run, fixed.target, fixed.budget_s) if fixed else None
    share, same_scoring = m.other_cpu_share, protocol.one_scoring(run)
    counted = f"{'yes' if protocol.counts(run, superseded) else 'no'} " \
              f"({fmt(100 * share) if share is not None else '-'} %)"
    counted += ", an earlier recipe" if superseded else ""
    counted += "" if same_scoring else f", validated at resize {protocol.validation_resize(run)}"
    counted += "".join(f", {rule}" for rule in protocol.round_rules_broken(run)) \
        if (run.point.protocol or 0) >= protocol.PROTOCOL else ""
    return [NAMES[program], fmt(run.point.seed), counted, fmt(m.start_s),
            fmt(measured and measured.time_to_target_s), fmt(measured and measured.core_s_to_target),
            fmt(measured and measured.best_in_budget), fmt(m.best_top1), fmt(m.epochs), fmt(m.wall_s),
            run.point.declared or "model", run.source]


def _spread(spread: Spread) -> str:
    if spread.median is None:
        return "-"
    return f"{fmt(spread.median)} ({fmt(spread.low)}-{fmt(spread.high)})"


SUMMARY_COLUMNS = ("program", "counted runs", "time to target (s)", "CPU s to target", "best top-1 in budget (%)",
                   "start (s)")


def _summary(runs: dict, fixed: Optional[Goal]) -> str:
    if fixed is None:
        return ""
    spreads = {program: protocol.spreads(protocol.counted(runs[program]), fixed) for program in NAMES}
    rows = [[NAMES[p], len(protocol.counted(runs[p])), *(_spread(spreads[p][key]) for key in ("wall", "cpu", "best",
                                                                                            "start"))] for p in NAMES]
    table = md_table(SUMMARY_COLUMNS, rows)
    return ("Medians (min-max) over the counted runs:\n\n" + table + "\n"
            + _verdicts(spreads, {p: len(protocol.counted(runs[p])) for p in NAMES}))


def _verdicts(spreads: dict, counts: dict) -> str:
    ours, examples = spreads[OURS_PROGRAM], spreads[EXAMPLES_PROGRAM]
    wall = protocol.ratio(examples["wall"].median, ours["wall"].median)
    cpu = protocol.ratio(examples["cpu"].median, ours["cpu"].median)
    best = ours["best"].median
    lines = [words("time_to_accuracy.goals", wall=_ratio(wall), cpu=_ratio(cpu), ratio=GOAL_RATIO, top1=GOAL_TOP1,
                   wall_verdict=_verdict(wall, GOAL_RATIO), cpu_verdict=_verdict(cpu, GOAL_RATIO), best=fmt(best),
                   best_verdict=_verdict(best, GOAL_TOP1))]
    short = [f"{NAMES[p]} {n} of {protocol.MIN_RUNS}" for p, n in counts.items() if n < protocol.MIN_RUNS]
    if short:
        lines.append(words("time_to_accuracy.provisional", runs=protocol.MIN_RUNS, short=", ".join(short)))
    else:  # the target is main.py's median best, so about half of its own runs miss it
        lines += [words("time_to_accuracy.missed", missed=spreads[p]["missed"], name=NAMES[p])
                  for p in NAMES if spreads[p]["missed"]]
    return "\n".join(lines) + "\n"


def _pooled(hardware: str, recs: Sequence[Record], prefix: str = "") -> str:
    """Every machine of one HARDWARE pooled into one target and budget: shown beside the per-machine results for
    comparison only, since one VM's or lease's speed is not another's."""
    runs = {program: [r for r in recs if r.point.program == program] for program in NAMES}
    fixed = protocol.goal(protocol.counted(runs[EXAMPLES_PROGRAM]))
    machines = len({protocol.machine(r) for r in recs})
    return words("time_to_accuracy.pooled", prefix=prefix, hardware=hardware, machines=machines) + "\n\n" + \
        _summary(runs, fixed)


def _ratio(value: Optional[float]) -> str:
    return f"**{value:.2f}**" if value is not None else "-"


def _verdict(value: Optional[float], goal: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value >= goal else "not met"


TUNING_COLUMNS = ("trial", "seed", "epochs", "final top-1 (%)", "best top-1 (%)", "wall (s)", "validation resize",
                  "record")


def _tuning(tuning: Sequence[Record]) -> str:
    if not tuning:
        return ""
    rows = [[" ".join(r.point.trial or []) or "(the recipe)", fmt(r.point.seed), fmt(r.metrics.epochs),
             fmt(r.metrics.final_top1), fmt(r.metrics.best_top1), fmt(r.metrics.wall_s),
             fmt(protocol.validation_resize(r)), r.source]
            for r in sorted(tuning, key=lambda r: r.time)]
    return words("time_to_accuracy.tuning", table=md_table(TUNING_COLUMNS, rows))


EARLIER_COLUMNS = ("program", "best top-1 (%)", "time to its target (s)", "wall (s)", "record")


def _earlier(earlier: Sequence[Record]) -> str:
    if not earlier:
        return ""
    rows = [[NAMES.get(r.point.program, r.point.program), fmt(r.metrics.best_top1), fmt(r.metrics.time_to_target_s),
             fmt(r.metrics.wall_s), r.source] for r in earlier]
    return words("time_to_accuracy.earlier", table=md_table(EARLIER_COLUMNS, rows))


PUBLISHED_COLUMNS = ("classifier", "preprocessing", "test top-1 (%)")


def published_table(ref_dir: Path = REFERENCE) -> str:
    """The data set's published accuracies, cited as its package README gives them."""
    path = ref_dir / "fashion_mnist.json"
    if not path.exists():
        return ""
    ref = json.loads(path.read_text())
    rows = [[r["classifier"], r["preprocessing"], f"{100 * r['accuracy']:.1f}"] for r in ref["rows"]]
    return words("time_to_accuracy.published", ref=ref, table=md_table(PUBLISHED_COLUMNS, rows))


def build(record_paths: Sequence[Path] = (RECORDS,), out_dir: Path = HERE, ref_dir: Path = REFERENCE) -> Path:
    """Write OUT_DIR/RESULTS.md and its figures from the race's records."""
    recs = records.load_typed(list(record_paths))[0]
    path = out_dir / "RESULTS.md"
    body = section(recs, out_dir / "figures", ref_dir) or "No records yet.\n"
    write_text(path, words("time_to_accuracy.head") + "\n" + body)
    return path
