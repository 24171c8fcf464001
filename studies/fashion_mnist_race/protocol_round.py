"""``python -m studies.fashion_mnist_race run --phase round``: the protocol round in one go, the only runs the
headline is taken from (docs/time-to-accuracy.md, "The protocol round").

Before anything runs, it checks what the round's records need in order to count (:func:`preflight`): this
boot's id, a pytorch/examples checkout, nothing that moves main.py off its defaults, and a clean tree
(:func:`require_clean_tree`, checked again before every run: each record names the commit its run started from).
Then it runs ``--tune``'s trials on the tuning split, takes the gpu recipe's trial from them, and runs ``--pairs``
pairs on the test split in the order of :func:`plan`: main.py, then the engine, one seed a pair, alternating. Every
record is appended as its run ends and carries the round's id; a failed run stops the round, and what was written
stays. The last lines say whether the round keeps every rule
(:func:`studies.fashion_mnist_race.headline.round_problems`).
"""
from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import from_dict
from hpc_imagenet.harness.runners.common import BenchError
from studies.fashion_mnist_race import examples_main, headline, runner
from studies.fashion_mnist_race.protocol import EXAMPLES_EPOCHS, LOADER_WORKERS

log = logging.getLogger(__name__)

SHOWN_CHANGES = 6  # changed files named in the refusal before "and N more"


def run(args: argparse.Namespace) -> List[dict]:
    """The race's ``run`` command: the round, or one phase (:func:`studies.fashion_mnist_race.runner.run`)."""
    return run_round(args) if args.phase == "round" else runner.run(args)


def plan(pairs: int, first_seed: int) -> List[Tuple[str, int]]:
    """The round's runs on the test split, in order: main.py then the engine with one seed, PAIRS times (main.py
    first: its runs so far set the target and the budget of the engine's run after it)."""
    return [(phase, first_seed + pair) for pair in range(pairs) for phase in ("examples", "ours")]


def require_clean_tree(root: Optional[Path] = None) -> None:
    """BenchError naming the changed files where ROOT's tree differs from its commit (tracked files changed, or files
    git neither tracks nor ignores) outside what the harness writes; where ROOT is no git checkout (a copy sent to
    a GPU machine), the source digest each record keeps stands in for the commit. ROOT: this checkout."""
    root = root or runner.REPO
    changed = sysinfo.changed_files(root, untracked=True)
    if changed is None:
        log.info("round: no git checkout here: the source digest %s stands in for the commit",
                 sysinfo.source_digest(root))
        return
    if changed:
        more = len(changed) - SHOWN_CHANGES
        shown = ", ".join(changed[:SHOWN_CHANGES]) + (f" and {more} more" if more > 0 else "")
        raise BenchError(f"the tree differs from its commit in {shown}: commit the changes (or git stash -u), then "
                         "rerun; a protocol round runs only from a clean tree")


def preflight(args: argparse.Namespace, root: Optional[Path] = None) -> None:
    """BenchError, before anything runs, where the round's records could not count."""
    if sysinfo.machine_id() is None:
        raise BenchError(f"no boot id in {sysinfo.BOOT_ID}: a round's records must name their machine's boot; run "
                         "the round on Linux")
    if args.examples is None or not (args.examples / examples_main.MAIN_PY).is_file():
        found = "" if args.examples is None else f" ({args.examples} has no {examples_main.MAIN_PY})"
        raise BenchError(f"a round runs main.py: pass --examples DIR, a pytorch/examples checkout{found} (git clone "
                         "https://github.com/pytorch/examples DIR)")
    if args.workers not in (None, LOADER_WORKERS) or args.unseeded_examples or args.trial:
        raise BenchError("a round runs main.py at its defaults, seeded, and both programs with its "
                         f"{LOADER_WORKERS} loader workers: drop --workers, --unseeded-examples and --trial (the "
                         "gpu recipe's trial is picked from --tune's)")
    if args.examples_epochs != EXAMPLES_EPOCHS:
        raise BenchError(f"a round runs main.py for the protocol's {EXAMPLES_EPOCHS} epochs: drop --examples-epochs "
                         "(--phase both makes a shorter pair, outside any round)")
    if args.pairs < 1:
        raise BenchError(f"--pairs {args.pairs}: a round needs at least one pair")
    if args.recipe == "gpu" and not args.tune:
        runner.counted_trial(args)  # tuned on this boot before, or refused now rather than after main.py's run
    if args.recipe == "gpu" and args.tune and args.within_s is None:
        raise BenchError("the gpu recipe's trial is picked within main.py's budget, unknown before its runs: pass "
                         "--within-s S, the budget of main.py's runs on this kind of machine")
    require_clean_tree(root)


def run_round(args: argparse.Namespace, root: Optional[Path] = None) -> List[dict]:
    """Tuning trials, then the pairs; the records written, in order. ROOT: the checkout whose tree is checked (this
    one by default)."""
    args.recipe = args.recipe or runner.default_recipe()
    preflight(args, root)
    args.round = records.new_sweep_id("round", args.tag)
    log.info("round %s: %d tuning trial(s), then %d pair(s) of main.py and the engine (seeds %d to %d); records in %s",
             args.round, len(args.tune), args.pairs, args.seed, args.seed + args.pairs - 1, args.records)
    out = [_checked(args, root, "tune", args.seed, trial, i, len(args.tune)) for i, trial in enumerate(args.tune, 1)]
    if args.recipe == "gpu":
        args.trial = shlex.join(runner.pick_trial(args))
    steps = plan(args.pairs, args.seed)
    for i, (phase, seed) in enumerate(steps, 1):
        out.append(_checked(args, root, phase, seed, args.trial, i, len(steps)))
    _verdict(args)
    return out


PHASES: Dict[str, Callable[[argparse.Namespace, Path], dict]] = {
    "tune": runner.run_tuning, "examples": runner.run_examples, "ours": runner.run_ours}


def _checked(args: argparse.Namespace, root: Optional[Path], phase: str, seed: int, trial: str, i: int, n: int) -> dict:
    """PHASE's run with SEED (and TRIAL) on its split, from a clean tree, with a progress line before; BenchError
    when it failed (its record is kept)."""
    require_clean_tree(root)
    what = {"tune": f"tuning trial {trial or '(the recipe)'}", "examples": "main.py", "ours": "the engine"}[phase]
    log.info("round %s: %s %d of %d: %s, seed %d", args.round, "trial" if phase == "tune" else "run", i, n, what, seed)
    one = argparse.Namespace(**{**vars(args), "seed": seed, "trial": trial})
    rec = PHASES[phase](one, runner.data_for(one, "tuning" if phase == "tune" else "test"))
    if not from_dict(rec).ok:
        raise BenchError(f"the round stopped: {what} (seed {seed}) failed: {rec['error']}; the records written so "
                         f"far stay in {args.records}")
    return rec


def _verdict(args: argparse.Namespace) -> None:
    """Log whether the round keeps every rule; BenchError when it does not (its records stay, shown as such)."""
    recs = records.load_typed([args.records])[0]
    problems = headline.round_problems(headline.round_runs(recs, args.round))
    if problems:
        for problem in problems:
            log.info("round %s: %s", args.round, problem)
        raise BenchError(f"round {args.round} does not make the headline: {problems[0]}"
                         + (f" (and {len(problems) - 1} more, above)" if len(problems) > 1 else ""))
    log.info("round %s keeps every rule of the protocol: `python -m studies.fashion_mnist_race check` prints its "
             "numbers, `... report` writes them up", args.round)
