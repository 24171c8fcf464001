"""RESULTS.md's time-to-accuracy section, from the ``time_to_accuracy`` records of
``python -m results.bench time-to-accuracy``: pytorch/examples' main.py and this engine on
Fashion-MNIST, their curves against wall time, the ratio of their times to the target (wall and CPU
seconds), and the data set's published table beside them.

The pair shown is the newest ``ours`` record and the examples record it took its target from (the
newest examples record when none has run yet).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from results.core.records import by_kind
from results.report import figures
from results.report.common import REFERENCE, fmt, md_table

HEADING = "Time to accuracy on real photographs (Fashion-MNIST)"
EXAMPLES = "pytorch/examples imagenet/main.py"
GOAL_RATIO = 2.0  # the benchmark's goal: time to the target at least 2x shorter than main.py's
GOAL_TOP1 = 92.0  # ...and, in main.py's wall time, at least this top-1 (the table's ResNet18: 94.9 %)


def pair(recs: Sequence[dict]) -> Tuple[Optional[dict], Optional[dict]]:
    """(examples record, ours record) to show, either None when missing."""
    ok = by_kind(recs, "time_to_accuracy")
    examples = [r for r in ok if r["point"]["program"] == EXAMPLES]
    ours = [r for r in ok if r["point"]["program"] != EXAMPLES]
    newest_ours = _newest(ours)
    source = [r for r in examples if newest_ours and r["sweep"] == newest_ours["point"].get("target_from")]
    candidates = source or examples
    return _newest(candidates), newest_ours


def _newest(recs: Sequence[dict]) -> Optional[dict]:
    """The newest record, the last written on a tie (record times are to the second)."""
    return sorted(recs, key=lambda r: r["time"])[-1] if recs else None


def ratio(slow: Optional[float], fast: Optional[float]) -> Optional[float]:
    return slow / fast if slow is not None and fast else None


def section(recs: Sequence[dict], fig_dir: Path, ref_dir: Path = REFERENCE) -> str:
    examples, ours = pair(recs)
    if examples is None and ours is None:
        return ""
    shown = [r for r in (examples, ours) if r is not None]
    target = shown[0]["metrics"]["target_top1"]
    budget = (ours or {}).get("metrics", {}).get("budget_s") or examples["metrics"]["wall_s"]
    series = [{"label": r["point"]["program"], "x": [p["wall_s"] / 60 for p in r["curve"]],
               "y": [p["top1"] for p in r["curve"]], "color": figures.palette(i)} for i, r in enumerate(shown)]
    fig = figures.time_to_accuracy(fig_dir / "time_to_accuracy.png", series, target, budget / 60,
                                   f"ResNet-18 on Fashion-MNIST at {shown[0]['point']['image_size']} px")
    out = [f"## {HEADING}\n",
           "`python -m results.bench time-to-accuracy`: pytorch/examples' `main.py` with its defaults for "
           f"{examples['point']['epochs_planned'] if examples else '-'} epochs sets the target (its best top-1) and "
           "the time budget (its wall time); this engine with its recipe trains on the same images and cores. "
           "Times are wall seconds since each program started, evaluation included; CPU seconds are those of "
           "the whole process tree (user + system), which other work sharing the cores hardly changes.\n",
           f"![time to accuracy]({fig.relative_to(fig_dir.parent).as_posix()})\n",
           md_table(["program", "target top-1 (%)", "time to target (s)", "epochs to target", "CPU s to target",
                     "best top-1 in budget (%)", "best top-1 (%)", "epochs", "wall (s)", "CPU s", "load 1 min mean/max",
                     "record"], [_row(r) for r in shown])]
    if examples and ours:
        out.append(_ratios(examples, ours))
    out.append(_recipes(examples, ours))
    out.append(published_table(ref_dir))
    return "\n".join(out)


def _row(record: dict) -> list:
    m = record["metrics"]
    in_budget = m.get("best_top1_in_budget", m["best_top1"])
    load = f"{fmt(m.get('load_1m_mean'))} / {fmt(m.get('load_1m_max'))} on {m.get('cores')} cores"
    return [record["point"]["program"], fmt(m["target_top1"]), fmt(m.get("time_to_target_s")),
            fmt(m.get("epochs_to_target")), fmt(m.get("core_s_to_target")), fmt(in_budget), fmt(m["best_top1"]),
            m["epochs"], fmt(m["wall_s"]), fmt(m["core_s"]), load, record["_source"]]


def _ratios(examples: dict, ours: dict) -> str:
    e, o = examples["metrics"], ours["metrics"]
    wall = ratio(e.get("time_to_target_s"), o.get("time_to_target_s"))
    cpu = ratio(e.get("core_s_to_target"), o.get("core_s_to_target"))
    if wall is None:
        return (f"This engine did not reach main.py's best ({fmt(e['target_top1'])} %) within its run "
                f"(best {fmt(o['best_top1'])} %): no ratio.\n")
    best = o.get("best_top1_in_budget")
    return (f"Time to {fmt(e['target_top1'])} % top-1: main.py {fmt(e['time_to_target_s'])} s, this engine "
            f"{fmt(o['time_to_target_s'])} s: ratio **{wall:.2f}** in wall time ({_verdict(wall, GOAL_RATIO)})"
            + (f", **{cpu:.2f}** in CPU seconds ({fmt(e['core_s_to_target'])} / {fmt(o['core_s_to_target'])}; "
               f"{_verdict(cpu, GOAL_RATIO)})" if cpu is not None else "")
            + f" (main.py's over this engine's; goal: at least {GOAL_RATIO:g}). When the two runs shared the "
            "cores with different loads (the load column), the CPU-second ratio is the fairer one.\n\n"
            + f"Best top-1 within main.py's wall time: {fmt(best) if best is not None else '-'} % (goal: at least "
            f"{GOAL_TOP1:g} %, {_verdict(best, GOAL_TOP1)}).\n")


def _verdict(value: Optional[float], goal: float) -> str:
    return "met" if value is not None and value >= goal else "not met"


def _recipes(examples: Optional[dict], ours: Optional[dict]) -> str:
    lines: List[str] = []
    if examples:
        p = examples["point"]
        settings = ", ".join(f"{k} {v}" for k, v in p["recipe"].items())
        lines.append(f"- main.py (commit {str(p.get('examples_commit'))[:12]}): {settings}; changed in its temporary "
                     f"copy: {'; '.join(p['changed_in_copy'])}. " + " ".join(examples.get("notes", [])))
    if ours:
        lines.append(f"- this engine: `{' '.join(ours['point']['recipe_flags'])}`, resolved as "
                     + json.dumps(ours["point"]["recipe"], sort_keys=True)
                     + (". It keeps an EMA of the weights: each evaluation counts the better top-1 of the model and "
                        "its average (both are in the record's curve)." if _with_ema(ours) else ""))
    return "Recipes:\n\n" + "\n".join(lines) + "\n"


def _with_ema(record: dict) -> bool:
    return any("top1_ema" in point for point in record["curve"])


def published_table(ref_dir: Path = REFERENCE) -> str:
    """The data set's published accuracies, cited as its package README gives them."""
    path = ref_dir / "fashion_mnist.json"
    if not path.exists():
        return ""
    ref = json.loads(path.read_text())
    rows = [[r["classifier"], r["preprocessing"], f"{100 * r['accuracy']:.1f}"] for r in ref["rows"]]
    return (f"Published Fashion-MNIST accuracies, from {ref['source']}; {ref['caveat']}\n\n"
            + md_table(["classifier", "preprocessing", "test top-1 (%)"], rows))
