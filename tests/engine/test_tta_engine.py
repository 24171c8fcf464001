"""Real photographs: the engine, with the recipe the time-to-accuracy benchmark uses (at batch 32),
learns a slice of Fashion-MNIST well above chance in two epochs (64 % measured, chance 10 %) and
records its time to a target, scored on its declared weights alone; the benchmark's ours phase runs
it against counted examples records; the tune phase runs on the held-out split with the test files
absent."""
import json

import pytest

from hpc_imagenet.imagenet.run import sysinfo
from hpc_imagenet.imagenet.train import time_to_accuracy
from studies.fashion_mnist_race import command as race
from hpc_imagenet.harness.core import records
from studies.fashion_mnist_race import examples_main, fashion_mnist
from studies.fashion_mnist_race import recipe as tta_recipe
from studies.fashion_mnist_race import runner as tta
from tests.helpers import explain, read_run, script, tb_scalars
from tests.warm_start import warm_python

CHANCE = 10.0  # % top-1 with 10 balanced classes


def test_engine_learns_real_photographs(fashion_cache, tmp_path):
    data = fashion_mnist.convert(fashion_mnist.SOURCE_DIR, fashion_cache, train_per_class=200, val_per_class=30)
    # batch 32: two epochs of 2,000 images are 125 steps (the recipe's batch 256 would give 15)
    # the recipe's EMA averages over about an epoch; over these 125 steps an average that old would
    # still be near its start, so decay 0.99 here: adjusted to batch 32 x 8 steps / 2 epochs, each update
    # takes the weights as they are (the scored model is still the average, evaluated alone)
    proc = warm_python(script("imagenet_ddp.py"), data, "--image-size", "32", *tta_recipe.RECIPE_FLAGS, "-b", "32",
                  "--model-ema-decay", "0.99",
                  "--epochs", "2", "--eval-every", "2", "-j", "1", "--desired-acc", "99", "--log-dir", tmp_path / "run",
                  timeout=600)
    assert proc.returncode == 0, explain(proc)
    run = read_run(tmp_path / "run")
    first, last = run["epochs"]
    assert "val_top1" not in first and last["val_samples"] == 300  # validated every 2 epochs: once
    assert last["val_top1"] >= 4 * CHANCE, run["epochs"]
    block = run["time_to_accuracy"]
    assert not block["reached"] and block["wall_s"] is None and block["target_top1"] == 99.0
    # the recipe declares the EMA of the weights: it alone is evaluated (once a point) and scored
    assert block["evaluations"] == 1 and block["eval_every"] == 2 and block["weights"] == "ema"
    assert block["eval_s"] == pytest.approx(last["val_time_s"]) and last["val_weights"] == "ema"
    assert block["curve"] == [{"epoch": 2, "elapsed_s": last["elapsed_s"], "top1": last["val_top1"], "weights": "ema"}]
    assert run["final"]["best_top1"] == last["val_top1"] and "val_top1_ema" not in last
    assert proc.stdout.count(" * Epoch 1: val top1") == 1 and "(ema)" in proc.stdout
    assert proc.stdout.count(time_to_accuracy.FIRST_STEP_LINE) == 1
    scalars = tb_scalars(tmp_path / "run")  # TensorBoard's own reader
    assert scalars["Top1/val"] == [(1, pytest.approx(last["val_top1"]))] and "Top1/val_ema" not in scalars
    assert 0 < first["core_s"] < last["core_s"] and first["elapsed_s"] < last["elapsed_s"]


def test_ours_phase_records_time_to_the_target(fashion_cache, tmp_path):
    data = fashion_mnist.convert(fashion_mnist.SOURCE_DIR, fashion_cache, train_per_class=40, val_per_class=10)
    out = tmp_path / "r.jsonl"
    examples = (("t-examples-1", 2.0, True), ("t-examples-2", 1.0, False), ("t-examples-3", 2.0, True))
    for sweep, best, counted in examples:
        records.append(out, records.make_record(
            "time_to_accuracy", sweep, {"program": tta.EXAMPLES_PROGRAM, "data": data.name, "image_size": 32,
                                        "protocol": tta.PROTOCOL, "seed": 0, "recipe": {"workers": 4},
                                        "examples_main_digest": "d1g35t",
                                        "examples_flags": ["--epochs", "10", "--seed", "0"]},
            # main.py's best here is a target every evaluation reaches (one epoch may score below chance;
            # 1 % would read as 100 %: --desired-acc takes 1 as a fraction)
            {"target_top1": best, "best_top1": best, "wall_s": 0.06, "core_s": 0.1, "epochs": 1, "eval_every": 1,
             "counted": counted},
            {"machine_id": sysinfo.machine_id(), "source_digest": "5ource"}))  # this machine's: its target counts here
    assert race.main(["run", "--phase", "ours", "--recipe", "cpu", "--cache", str(fashion_cache),
                       "--train-per-class", "40", "--val-per-class", "10", "--records", str(out),
                       "--work", str(tmp_path / "work"), "--seed", "5"]) == 0
    rec = json.loads(out.read_text().splitlines()[-1])
    assert rec["status"] == "ok" and records.validate(rec) is None
    assert rec["point"]["target_from"] == ["t-examples-1", "t-examples-3"]  # the counted ones
    assert rec["point"]["seed"] == 5 and rec["point"]["recipe"]["seed"] == 5 and rec["point"]["declared"] == "ema"
    assert rec["point"]["tuned_on"]["split"] == "tuning" and rec["point"]["split"] == "test"
    assert {p["weights"] for p in rec["curve"]} == {"ema"}
    assert 0 < rec["metrics"]["start_s"] < rec["curve"][0]["wall_s"] and "other_cpu_share" in rec["metrics"]
    m = rec["metrics"]
    # a 0.06 s budget (0.001 minutes), shorter than any epoch: the engine stops at the end of its first
    # epoch, whose evaluation reaches the target
    assert m["epochs"] == 1 and m["budget_s"] == 0.06 and m["best_top1_in_budget"] is None
    assert m["time_to_target_s"] == rec["curve"][0]["wall_s"] and m["core_s_to_target"] > 0
    assert m["images_seen"] == 256 and m["eval_every"] == 1  # 1 full batch of 256 from 400 images
    assert rec["engine_time_to_accuracy"]["reached"] and rec["engine_status"] == "reached_desired_acc"
    stages = rec["engine_startup"]["stages"]  # where the time before the first step went, kept in the record, in order
    names = [stage["stage"] for stage in stages]
    assert names[0].startswith("interpreter") and names[-1].startswith("first training step")
    assert "torch and the engine imported" in names and "model built and moved to the device" in names
    assert rec["engine_startup"]["total_s"] == pytest.approx(sum(stage["s"] for stage in stages), abs=0.01)
    assert rec["environment"]["machine_id"] == sysinfo.machine_id()
    assert rec["point"]["recipe"]["scaled_lr"] == 0.3  # 0.3 per 256 at batch 256
    assert rec["point"]["recipe_flags"] == [*tta_recipe.RECIPE_FLAGS, *tta.scoring_flags(32)]
    # one scoring: the engine validated as main.py's copy does (Resize(36), CenterCrop(32)), not at its own
    # default (37 at 32 px)
    assert ("transforms.Resize(256)", "transforms.Resize(36)") in examples_main.size_replacements(32)
    assert (rec["point"]["recipe"]["val_resize_size"], rec["point"]["recipe"]["val_crop_size"]) == (36, 32)
    # the settings as the engine resolved them, read from its run.json (the recipe flags say batch 256, EMA)
    assert rec["point"]["recipe"]["batch_size"] == 256 and rec["point"]["recipe"]["model_ema"] is True
    # the engine's checkpoints go once the run is recorded; its log, run.json and events stay
    run_dir = tmp_path / "work" / rec["sweep"] / "run"
    assert (run_dir / "run.json").exists() and list(run_dir.glob("events.out.tfevents.*"))
    assert not list(run_dir.glob("*.pth.tar")) and (tmp_path / "work" / rec["sweep"] / "engine.log").exists()


def test_tuning_runs_on_held_out_training_photographs_without_the_test_files(fashion_cache, tmp_path):
    source = tmp_path / "only-train"
    source.mkdir()
    for name in fashion_mnist.FILES["train"]:  # the test photographs are not there to be read
        (source / name).symlink_to(fashion_mnist.SOURCE_DIR / name)
    out = tmp_path / "r.jsonl"
    assert race.main(["run", "--phase", "tune", "--recipe", "cpu", "--fashion-mnist", str(source),
                       "--cache", str(tmp_path / "cache"), "--train-per-class", "40", "--val-per-class", "10",
                       "--trial", "--epochs 2 --lr-peak-epoch 0.5 --wd 5e-4 --eval-every 2", "--records", str(out),
                       "--work", str(tmp_path / "work"), "--keep-checkpoints"]) == 0
    rec = json.loads(out.read_text().splitlines()[-1])
    assert (tmp_path / "work" / rec["sweep"] / "run" / "checkpoint.pth.tar").exists()  # kept, as asked
    assert rec["kind"] == "tta_tuning" and rec["status"] == "ok" and records.validate(rec) is None
    assert rec["point"]["split"] == "tuning" and rec["point"]["trial"][-4:] == ["--wd", "5e-4", "--eval-every", "2"]
    assert rec["point"]["recipe"]["weight_decay"] == 5e-4 and rec["metrics"]["epochs"] == 2
    assert rec["metrics"]["eval_every"] == 2  # the trial's own, as the engine ran it (the recipe says 1)
    assert rec["point"]["recipe"]["val_resize_size"] == 36  # scored as main.py is, in tuning too
    assert rec["metrics"]["final_top1"] == rec["curve"][-1]["top1"]
    assert rec["point"]["data"] == "fashion-mnist-tuning-40x10"
