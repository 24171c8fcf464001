"""The race's headline: the newest protocol round whose runs keep every rule, and the rules of a round as a whole.

A run of a round counts under :func:`studies.fashion_mnist_race.protocol.why_not_counted` (quiet, scored as main.py
is, and the round's rules for one run: seeded, its boot named, a clean tree with its source digest, main.py's
version and defaults, main.py's loader workers for both programs). :func:`round_problems` adds the round's own:
every run on one boot, main.py first and the two programs alternating in the order they ran, one main.py, and at
least ``MIN_RUNS`` counted runs of each program. Only a round without a problem gives the headline
(:func:`headline`); ``python -m studies.fashion_mnist_race check`` prints it, or why there is none (:func:`check`).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report.common import fmt
from studies.fashion_mnist_race import RECORDS, protocol
from studies.fashion_mnist_race import words as race_words  # headline.words is this module's own
from studies.fashion_mnist_race.protocol import (EXAMPLES_PROGRAM, GOAL_RATIO, GOAL_TOP1, MIN_RUNS, NAMES,
                                                 OURS_PROGRAM)


def round_ids(recs: Sequence[Record]) -> List[str]:
    """The rounds in RECS, in the order they began."""
    runs = sorted((r for program in NAMES for r in protocol.protocol_runs(recs, program) if r.point.round),
                  key=lambda r: r.time)
    return list(dict.fromkeys(r.point.round for r in runs))


def round_runs(recs: Sequence[Record], round_id: str) -> List[Record]:
    """ROUND_ID's finished runs on the test split, both programs, in the order they ran (by the time each was
    recorded, and where two share a second, by their order in the records: each is appended as its run ends)."""
    ran = {id(r) for program in NAMES for r in protocol.protocol_runs(recs, program) if r.point.round == round_id}
    return sorted((r for r in recs if id(r) in ran), key=lambda r: r.time)


def round_problems(runs: Sequence[Record]) -> List[str]:
    """Every rule a round's RUNS (oldest first) break, one line each; none: the round gives the headline."""
    if not runs:
        return ["no run of the round finished"]
    problems = _order_problems(runs)
    boots = sorted({r.environment.machine_id or "unknown" for r in runs})
    problems += [f"its runs ran on {len(boots)} boots ({', '.join(boots)}), not one"] if len(boots) > 1 else []
    versions = sorted({_examples_version(r) or "unknown" for r in runs})
    problems += [f"its runs name {len(versions)} versions of main.py ({', '.join(versions)}), not one"] \
        if len(versions) > 1 else []
    for program, name in NAMES.items():
        mine = [r for r in runs if r.point.program == program]
        counted = protocol.counted(mine)
        if len(counted) < MIN_RUNS:
            left = [f"{r.source} ({', '.join(protocol.why_not_counted(r, protocol.superseded(r, mine)))})"
                    for r in mine if r not in counted]
            problems.append(f"{name}: {len(counted)} counted run(s) of the {MIN_RUNS} the protocol asks"
                            + (f"; not counted: {'; '.join(left)}" if left else ""))
    return problems


def _order_problems(runs: Sequence[Record]) -> List[str]:
    """main.py first (its runs set the target), then the programs in turn, as they ran."""
    first = runs[0]
    problems = [] if first.point.program == EXAMPLES_PROGRAM else \
        [f"it starts with {NAMES[first.point.program]}'s run ({first.source}), not main.py's"]
    return problems + [f"not alternating: {a.source} and {b.source} are both {NAMES[a.point.program]}'s"
                       for a, b in zip(runs, runs[1:]) if a.point.program == b.point.program]


def _examples_version(run: Record) -> Optional[str]:
    return run.point.examples_commit or run.point.examples_main_digest


@dataclass(frozen=True)
class Headline:
    """A round's numbers: main.py's target and budget, and each program's counted runs against them."""

    round: str
    machine: str
    goal: protocol.Goal
    spreads: Dict[str, dict]  # program -> protocol.spreads
    counts: Dict[str, int]  # program -> counted runs

    @property
    def wall_ratio(self) -> Optional[float]:
        return protocol.ratio(self.spreads[EXAMPLES_PROGRAM]["wall"].median, self.spreads[OURS_PROGRAM]["wall"].median)

    @property
    def cpu_ratio(self) -> Optional[float]:
        return protocol.ratio(self.spreads[EXAMPLES_PROGRAM]["cpu"].median, self.spreads[OURS_PROGRAM]["cpu"].median)


def numbers(round_id: str, runs: Sequence[Record]) -> Headline:
    """ROUND_ID's numbers from its RUNS (a round that keeps every rule: main.py has counted runs)."""
    counted = {program: protocol.counted([r for r in runs if r.point.program == program]) for program in NAMES}
    fixed = protocol.goal(counted[EXAMPLES_PROGRAM])
    return Headline(round_id, protocol.machine(runs[0]), fixed,
                    {p: protocol.spreads(counted[p], fixed) for p in NAMES}, {p: len(counted[p]) for p in NAMES})


def headline(recs: Sequence[Record]) -> Tuple[Optional[Headline], Dict[str, List[str]]]:
    """The newest round that keeps every rule (None: none does), and every round's problems."""
    problems = {rid: round_problems(round_runs(recs, rid)) for rid in round_ids(recs)}
    good = [rid for rid, broken in problems.items() if not broken]
    return (numbers(good[-1], round_runs(recs, good[-1])) if good else None), problems


def words(recs: Sequence[Record]) -> str:
    """The headline in words, with every round that does not make it and why; or that there is none yet."""
    best, problems = headline(recs)
    lines = []
    for rid, broken in problems.items():
        refused = [race_words("time_to_accuracy.round_refused", round=rid)]
        lines += refused + [f"  - {p}" for p in broken] if broken else []
    if best is None:
        return "\n".join([race_words("time_to_accuracy.no_headline"), *lines]) + "\n"
    s = best.spreads
    text = race_words("time_to_accuracy.headline", round=best.round, machine=best.machine,
                      examples=best.counts[EXAMPLES_PROGRAM], ours=best.counts[OURS_PROGRAM],
                      target=fmt(best.goal.target), budget=fmt(best.goal.budget_s),
                      ours_wall=fmt(s[OURS_PROGRAM]["wall"].median),
                      examples_wall=fmt(s[EXAMPLES_PROGRAM]["wall"].median),
                      wall=_x(best.wall_ratio), cpu=_x(best.cpu_ratio), ratio=GOAL_RATIO,
                      best=fmt(s[OURS_PROGRAM]["best"].median), top1=GOAL_TOP1)
    return "\n".join([text, *lines]) + "\n"


def _x(value: Optional[float]) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def check(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m studies.fashion_mnist_race check``: the headline recomputed from the records; 1 when no round
    keeps every rule."""
    ap = argparse.ArgumentParser(prog="python -m studies.fashion_mnist_race check", description=check.__doc__)
    ap.add_argument("--records", nargs="*", type=Path, default=[RECORDS], help="record files or folders of *.jsonl "
                    "(default: this study's records/)")
    args = ap.parse_args(argv)
    missing = [p for p in args.records if not Path(p).exists()]
    if missing:
        print(f"error: {missing[0]} does not exist; pass record files or a folder of *.jsonl", file=sys.stderr)
        return 2
    recs = records.load_typed(list(args.records))[0]
    print(words(recs), end="")
    return 0 if headline(recs)[0] is not None else 1
