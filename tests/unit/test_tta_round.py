"""The protocol round's rules without training: hand-made records of one round, each rule broken in turn, and the
headline check refusing them; the source digest that stands in for a clean tree covering the harness and the study."""
import pytest

from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.harness.core import kinds, records
from studies.fashion_mnist_race import command as race
from studies.fashion_mnist_race import headline, protocol

MAIN, OURS = protocol.EXAMPLES_PROGRAM, protocol.OURS_PROGRAM
ROUND = "tta-round-20261205T010000Z-abcd"


def _run(program, pair, line, **change):
    """One run of ROUND as the round writes it, keeping every rule unless CHANGE says otherwise (keys: point fields,
    or ``env_*`` for the environment's)."""
    main = program == MAIN
    point = {"program": program, "data": "fashion-mnist", "image_size": 32, "seed": pair, "protocol": protocol.PROTOCOL,
             "split": "test", "round": ROUND, "examples_main_digest": "d1g35t",
             "recipe": {"workers": 4} if main else {"workers": 4, "val_resize_size": 36, "val_crop_size": 32},
             **({"examples_flags": ["--epochs", "10", "--seed", str(pair)]} if main else {"recipe_flags": ["-j", "4"]})}
    point.update({k: v for k, v in change.items() if not k.startswith("env_") and k != "counted"})
    env = {"machine_id": "boot-a", "git_commit": "abc123", "source_digest": "5ource", "cpu_count": 2}
    env.update({k[4:]: v for k, v in change.items() if k.startswith("env_")})
    # main.py reaches 85 % at 400 s; the engine at 100 s, and 91 % within the budget
    curve = [{"epoch": 1, "wall_s": 400.0 if main else 100.0, "core_s": 800.0 if main else 200.0, "top1": 85.0},
             *([] if main else [{"epoch": 2, "wall_s": 300.0, "core_s": 600.0, "top1": 91.0}])]
    counted = change.get("counted", True)
    metrics = {"target_top1": 85.0, "best_top1": curve[-1]["top1"], "wall_s": curve[-1]["wall_s"],
               "core_s": curve[-1]["core_s"], "epochs": len(curve), "eval_every": 1, "counted": counted,
               "other_cpu_share": 0.01 if counted else 0.4}
    rec = records.make_record("time_to_accuracy", f"s-{line}", point, metrics, env, curve=curve)
    return kinds.from_dict({**rec, "time": f"2026-12-05T01:{line:02d}:00+00:00", "_source": f"tta.jsonl:{line}"})


def _round(broken=None, **change):
    """Three pairs, main.py first; CHANGE applied to the run at index BROKEN."""
    runs = [_run(program, seed, 2 * seed + (program == OURS)) for seed in (1, 2, 3) for program in (MAIN, OURS)]
    if broken is not None:
        program, seed = runs[broken].point.program, runs[broken].point.seed
        runs[broken] = _run(program, seed, int(runs[broken].source.split(":")[1]), **change)
    return runs


def _problems(runs):
    return headline.round_problems(headline.round_runs(runs, ROUND))


def test_a_round_that_keeps_every_rule_gives_the_headline():
    runs = _round()
    assert _problems(runs) == []
    best, problems = headline.headline(runs)
    assert problems == {ROUND: []} and best.round == ROUND and best.counts == {MAIN: 3, OURS: 3}
    # target 85 % (main.py's median best) and budget 400 s: main.py 400 s to it, the engine 100 s
    assert (best.goal.target, best.goal.budget_s, best.wall_ratio, best.cpu_ratio) == (85.0, 400.0, 4.0, 4.0)
    assert "**4.00x** in wall time, **4.00x** in CPU seconds" in headline.words(runs)


@pytest.mark.parametrize("broken, change, says", [
    (2, {"seed": None}, "main.py: 2 counted run(s) of the 3 the protocol asks; not counted: tta.jsonl:4 (unseeded"),
    (3, {"env_git_commit": "abc123-dirty"}, "not counted: tta.jsonl:5 (dirty tree (abc123-dirty))"),
    (1, {"env_source_digest": None}, "this engine: 2 counted run(s)"),
    (1, {"env_source_digest": None}, "(no source digest)"),
    (0, {"examples_main_digest": None}, "main.py's version unknown"),
    (4, {"examples_flags": ["--epochs", "10", "--seed", "3", "-j", "14"]}, "main.py not at its defaults (given "
                                                                            "--epochs 10 --seed 3 -j 14)"),
    (4, {"examples_flags": None}, "main.py not at its defaults (given nothing recorded)"),
    (5, {"recipe": {"workers": 2, "val_resize_size": 36, "val_crop_size": 32}}, "2 loader workers, not 4"),
    (5, {"env_machine_id": None}, "no machine id (boot)"),
    (5, {"env_machine_id": "boot-b"}, "its runs ran on 2 boots (boot-a, boot-b), not one"),
    (5, {"examples_main_digest": "0th3r"}, "its runs name 2 versions of main.py (0th3r, d1g35t), not one"),
    (2, {"counted": False}, "not counted: tta.jsonl:4 (others used 40 % of the CPU)"),
])
def test_the_headline_refuses_a_round_that_breaks_a_rule(broken, change, says):
    runs = _round(broken, **change)
    problems = _problems(runs)
    assert any(says in p for p in problems), problems
    assert headline.headline(runs)[0] is None and "No headline yet" in headline.words(runs)


def test_the_headline_refuses_a_round_out_of_order_or_short():
    runs = _round()
    swapped = [_run(OURS, 1, 2), _run(MAIN, 1, 3), *runs[2:]]  # the engine first: no target yet when it ran
    assert "it starts with this engine's run (tta.jsonl:2), not main.py's" in _problems(swapped)
    blocks = [_run(MAIN, s, s) for s in (1, 2, 3)] + [_run(OURS, s, 3 + s) for s in (1, 2, 3)]  # main.py's, then ours
    assert "not alternating: tta.jsonl:1 and tta.jsonl:2 are both main.py's" in _problems(blocks)
    assert _problems(runs[:4]) == ["main.py: 2 counted run(s) of the 3 the protocol asks",
                                   "this engine: 2 counted run(s) of the 3 the protocol asks"]
    assert _problems([]) == ["no run of the round finished"]


def test_the_rules_of_the_round_are_the_protocol_round_s_alone():
    """Protocol 2's records (the history) are counted by that version's rules and never give the headline."""
    older = [_run(p, s, i, protocol=2, seed=None, examples_flags=None) for i, (p, s) in
             enumerate([(MAIN, 1), (OURS, 1), (MAIN, 2), (OURS, 2), (MAIN, 3), (OURS, 3)], 1)]
    main_py = [r for r in older if r.point.program == MAIN]
    assert protocol.counted(main_py) == main_py
    assert protocol.protocol_runs(older, MAIN) == [] and headline.headline(older) == (None, {})


def test_check_prints_the_headline_or_why_there_is_none(tmp_path, capsys):
    path = tmp_path / "tta.jsonl"
    for run in _round(2, seed=None):
        records.append(path, {k: v for k, v in run.raw.items() if k != "_source"})
    assert race.main(["check", "--records", str(path)]) == 1
    out = capsys.readouterr().out
    assert "**No headline yet.**" in out and f"Round `{ROUND}` does not make the headline:" in out
    assert "  - main.py: 2 counted run(s) of the 3 the protocol asks; not counted: tta.jsonl:3 (unseeded" in out
    assert race.main(["check", "--records", str(tmp_path / "none.jsonl")]) == 2


def test_the_source_digest_covers_the_engine_the_harness_and_the_study(tmp_path):
    files = {"hpc_imagenet/imagenet/a.py": "a", "hpc_imagenet/launch/b.py": "b", "hpc_imagenet/harness/c.py": "c",
             "imagenet/imagenet_x.py": "x", "results/gpu_session.sh": "s", "studies/race/d.py": "d",
             "hpc_imagenet/imagenet/data/e.c": "e"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    first = sysinfo.source_digest(tmp_path)
    for name in files:  # a change in any of them is another digest
        (tmp_path / name).write_text(files[name] + "!")
        assert sysinfo.source_digest(tmp_path) != first, name
        (tmp_path / name).write_text(files[name])
    assert sysinfo.source_digest(tmp_path) == first
    # what the harness writes is not code: records, write-ups, and the scratch folder's data
    for name in ("results/records/r.jsonl", "studies/race/RESULTS.md", "results/scratch/tta/main.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert sysinfo.source_digest(tmp_path) == first
