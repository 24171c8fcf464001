"""The time-to-accuracy benchmark without training: the Fashion-MNIST converter on IDX files written
here, main.py's patched copy and the examples phase on a stand-in main.py that prints what the real
one prints, the record it leaves, the engine's time_to_accuracy block, and the report section."""
import gzip
import json

import numpy as np
import pytest
from PIL import Image

from imagenet import config
from imagenet.train import time_to_accuracy
from results import bench
from results.core import records
from results.report import time_to_accuracy as tta_report
from results.runners import examples_main, fashion_mnist, tta
from results.runners.common import BenchError

# main.py's three size lines as the real file spells them, then lines printed the way its
# ProgressMeter prints them; the stand-in also says where its copy lives and which sizes it got.
FAKE_MAIN = '''import os, sys
train = "transforms.RandomResizedCrop(224)"
val = "transforms.Resize(256)", "transforms.CenterCrop(224)"
print("copy at", os.path.abspath(__file__))
print("sizes", train, *val)
epochs = int(sys.argv[sys.argv.index("--epochs") + 1])
for epoch, acc in enumerate([41.5, 63.25, 60.0][:epochs]):
    print(f"Epoch: [{epoch}][ 1/40]\\tTime  0.100 ( 0.100)")
    print("Test: [ 1/40]\\tTime  0.050 ( 0.050)")
    print(f" * Acc@1 {acc:.3f} Acc@5 90.000")
sys.exit(int(os.environ.get("FAKE_MAIN_EXIT", "0")))
'''


def write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def idx_dir(tmp_path):
    """The four packaged files, 3 train and 2 test images per class, each image a distinct grey level."""
    src = tmp_path / "src"
    src.mkdir()
    for split, per_class in (("train", 3), ("t10k", 2)):
        labels = np.repeat(np.arange(10), per_class)
        images = np.stack([np.full((28, 28), 20 * label + i, np.uint8) for i, label in enumerate(labels)])
        write_idx(src / f"{split}-images-idx3-ubyte.gz", images)
        write_idx(src / f"{split}-labels-idx1-ubyte.gz", labels)
    return src


@pytest.fixture
def examples_checkout(tmp_path):
    checkout = tmp_path / "examples"
    (checkout / "imagenet").mkdir(parents=True)
    (checkout / "imagenet" / "main.py").write_text(FAKE_MAIN)
    return checkout


def test_convert_writes_an_image_folder_once(idx_dir, tmp_path):
    out = fashion_mnist.convert(idx_dir, tmp_path / "cache")
    assert sorted(p.name for p in (out / "train").iterdir()) == sorted(fashion_mnist.CLASS_NAMES)
    assert fashion_mnist.counts_of(out) == {"train": 30, "val": 20}
    assert fashion_mnist.classes_of(out)[9] == "ankle_boot"
    bags = sorted((out / "val" / "bag").glob("*.jpg"))
    assert len(bags) == 2
    with Image.open(bags[0]) as img:
        assert (img.mode, img.size) == ("RGB", (28, 28))
        assert abs(int(np.asarray(img)[14, 14, 0]) - 176) <= 2  # test image 16 (label 8): grey 20 * 8 + 16
    stamp = bags[0].stat().st_mtime_ns
    assert fashion_mnist.convert(idx_dir, tmp_path / "cache") == out  # reused, not rewritten
    assert bags[0].stat().st_mtime_ns == stamp
    sliced = fashion_mnist.convert(idx_dir, tmp_path / "cache", train_per_class=1, val_per_class=1)
    assert sliced.name == "fashion-mnist-1x1" and fashion_mnist.counts_of(sliced) == {"train": 10, "val": 10}


def test_missing_files_say_how_to_get_them(tmp_path, capsys):
    rc = bench.main(["time-to-accuracy", "--fashion-mnist", str(tmp_path), "--cache", str(tmp_path / "c"),
                     "--records", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "apt-get install dataset-fashion-mnist" in err and "train-images-idx3-ubyte.gz" in err
    assert not (tmp_path / "c").exists()


def test_truncated_idx_is_refused(idx_dir, tmp_path):
    path = idx_dir / "train-images-idx3-ubyte.gz"
    data = gzip.open(path).read()
    with gzip.open(path, "wb") as f:
        f.write(data[:1000])
    with pytest.raises(BenchError, match="truncated"):
        fashion_mnist.convert(idx_dir, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("fashion-mnist"))  # no half-written folder under the final name


def test_patched_copy_changes_only_the_sizes(examples_checkout, tmp_path):
    copy = examples_main.patched_copy(examples_checkout, 32, tmp_path)
    before = (examples_checkout / "imagenet" / "main.py").read_text().splitlines()
    after = copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 2  # the two validation sizes share a line here
    assert "RandomResizedCrop(32)" in after[1] and "Resize(36)" in after[2] and "CenterCrop(32)" in after[2]


def test_unknown_main_py_is_refused(examples_checkout, tmp_path):
    main = examples_checkout / "imagenet" / "main.py"
    main.write_text(main.read_text().replace("Resize(256)", "Resize(288)"))
    with pytest.raises(BenchError, match=r"0 occurrence\(s\) of 'transforms.Resize\(256\)'"):
        examples_main.patched_copy(examples_checkout, 32, tmp_path)
    with pytest.raises(BenchError, match="pytorch/examples checkout"):
        examples_main.patched_copy(tmp_path / "nowhere", 32, tmp_path)


def _run_examples(idx_dir, checkout, tmp_path, epochs="3"):
    rc = bench.main(["time-to-accuracy", "--phase", "examples", "--examples", str(checkout),
                     "--fashion-mnist", str(idx_dir), "--cache", str(tmp_path / "cache"),
                     "--work", str(tmp_path / "work"), "--records", str(tmp_path / "r.jsonl"),
                     "--examples-epochs", epochs])
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    return rc, json.loads(lines[-1])


def test_examples_phase_records_main_py_curve(idx_dir, examples_checkout, tmp_path):
    rc, rec = _run_examples(idx_dir, examples_checkout, tmp_path)
    assert rc == 0 and rec["kind"] == "time_to_accuracy" and records.validate(rec) is None
    assert [p["top1"] for p in rec["curve"]] == [41.5, 63.25, 60.0]
    assert all(p["core_s"] >= 0 for p in rec["curve"])
    m = rec["metrics"]
    assert m["target_top1"] == 63.25 and m["best_top1"] == 63.25  # the target is main.py's best
    assert m["epochs_to_target"] == 2 and m["time_to_target_s"] == rec["curve"][1]["wall_s"]
    assert m["epochs"] == 3 and m["images_seen"] == 90 and m["eval_every"] == 1
    assert m["wall_s"] >= m["time_to_target_s"] and m["cores"] >= 1 and m["load_1m_max"] >= 0
    assert len(rec["point"]["changed_in_copy"]) == 3 and "does not fire" in rec["notes"][0]
    log_text = next((tmp_path / "work").glob("*/main.log")).read_text()
    # main.py ran as the copy with 32/36/32 in place of 224/256/224
    assert "sizes transforms.RandomResizedCrop(32) transforms.Resize(36) transforms.CenterCrop(32)" in log_text
    copy = log_text.split("copy at ", 1)[1].split()[0]
    assert not (tmp_path / copy).exists() and "/tmp/" not in json.dumps(rec)  # deleted; no machine paths


def test_examples_phase_failure_is_recorded(idx_dir, examples_checkout, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MAIN_EXIT", "3")
    rc, rec = _run_examples(idx_dir, examples_checkout, tmp_path, epochs="1")
    assert rc == 1 and rec["status"] == "failed" and "main.py exited 3" in rec["error"]


def test_ours_phase_needs_an_examples_record(idx_dir, tmp_path, capsys):
    rc = bench.main(["time-to-accuracy", "--phase", "ours", "--fashion-mnist", str(idx_dir), "--cache",
                     str(tmp_path / "cache"), "--records", str(tmp_path / "none.jsonl")])
    assert rc == 2 and "run --phase examples first" in capsys.readouterr().err


def test_examples_record_picks_the_newest_for_the_data(idx_dir, examples_checkout, tmp_path):
    _run_examples(idx_dir, examples_checkout, tmp_path, epochs="1")
    _, newest = _run_examples(idx_dir, examples_checkout, tmp_path, epochs="2")
    found = tta.examples_record(tmp_path / "r.jsonl", "fashion-mnist", 32)
    assert found["sweep"] == newest["sweep"] and found["metrics"]["best_top1"] == 63.25
    with pytest.raises(BenchError, match="no examples record for fashion-mnist at 28 px"):
        tta.examples_record(tmp_path / "r.jsonl", "fashion-mnist", 28)


def test_engine_block_counts_to_the_first_evaluation_at_the_target():
    history = [{"epoch": 0, "train_samples": 100, "elapsed_s": 10.0, "core_s": 19.0},
               {"epoch": 1, "train_samples": 100, "elapsed_s": 21.0, "core_s": 40.0, "val_top1": 70.0,
                "val_time_s": 1.0},
               {"epoch": 2, "train_samples": 100, "elapsed_s": 31.0, "core_s": 59.0},
               {"epoch": 3, "train_samples": 100, "elapsed_s": 42.0, "core_s": 80.0, "val_top1": 80.5,
                "val_time_s": 1.0}]
    block = time_to_accuracy.summary(history, 0.80, 2, 4, "cuda")
    assert block["reached"] and block["wall_s"] == 42.0 and block["epochs"] == 4 and block["images_seen"] == 400
    assert block["eval_s"] == 2.0 and block["evaluations"] == 2 and block["eval_every"] == 2
    assert block["core_s"] == 80.0 and block["device_hours"] == pytest.approx(42.0 * 4 / 3600)
    assert [p["top1"] for p in block["curve"]] == [70.0, 80.5]
    missed = time_to_accuracy.summary(history, 0.9, 2, 1, "cpu")
    assert not missed["reached"] and missed["wall_s"] is None and missed["device_hours"] is None
    assert time_to_accuracy.summary(history, None, 1, 1, "cpu") is None


def test_the_better_of_the_model_and_its_ema_counts():
    history = [{"epoch": 0, "train_samples": 100, "elapsed_s": 12.0, "core_s": 20.0, "val_top1": 70.0,
                "val_time_s": 1.0, "val_top1_ema": 72.0, "val_time_s_ema": 1.5},
               {"epoch": 1, "train_samples": 100, "elapsed_s": 24.0, "core_s": 40.0, "val_top1": 81.0,
                "val_time_s": 1.0, "val_top1_ema": 79.0, "val_time_s_ema": 1.5}]
    block = time_to_accuracy.summary(history, 0.71, 1, 1, "cpu")
    assert block["reached"] and block["epochs"] == 1 and block["reached_by"] == "ema" and block["eval_s"] == 2.5
    assert [p["top1"] for p in block["curve"]] == [72.0, 81.0]
    assert block["curve"][1]["top1_model"] == 81.0 and block["curve"][1]["top1_ema"] == 79.0
    assert time_to_accuracy.summary(history, 0.80, 1, 1, "cpu")["reached_by"] == "model"


def test_the_harness_reads_the_ema_line_before_its_epoch_line():
    lines, moment = tta.EngineLines(), _Moment()
    lines(moment, " * EMA of the weights: val top1 88.10  top5 99.80")
    lines(moment, " * Epoch 2: val top1 87.50  top5 99.70  loss 0.5  (10000 images)  train 500.0 img/s")
    lines(moment, " * Epoch 3: val top1 89.00  top5 99.90  loss 0.4  (10000 images)  train 500.0 img/s")
    assert [(p["epoch"], p["top1"], p.get("top1_ema")) for p in lines.curve] == [(3, 88.1, 88.1), (4, 89.0, None)]
    assert lines.curve[0]["top1_model"] == 87.5


class _Moment:
    wall_s = 100.0

    def cpu_s(self) -> float:
        return 190.0


def test_eval_every_and_budget_are_checked():
    with pytest.raises(config.ConfigError, match="--eval-every must be at least 1"):
        config.parse(["--dummy", "--eval-every", "0"])
    with pytest.raises(config.ConfigError, match="--time-budget-minutes must be positive"):
        config.parse(["--dummy", "--time-budget-minutes", "0"])
    cfg = config.parse(["--dummy", "--eval-every", "4", "--time-budget-minutes", "1.5"])
    assert (cfg.optim.eval_every, cfg.optim.time_budget_minutes) == (4, 1.5)


def _tta_record(program, sweep, curve, **metrics):
    point = {"program": program, "image_size": 32, "epochs_planned": 10, "recipe": {"lr": 0.1},
             "changed_in_copy": ["a -> b"], "recipe_flags": ["-b", "128"], "target_from": "ex-1"}
    rec = records.make_record("time_to_accuracy", sweep, point, {"eval_every": 1, "epochs": len(curve), **metrics},
                              {}, curve=curve)
    rec["_source"] = f"t.jsonl:{sweep}"
    return rec


def test_report_shows_both_curves_the_ratio_and_the_table(tmp_path):
    examples = _tta_record(tta.EXAMPLES_PROGRAM, "ex-1", [{"epoch": 1, "wall_s": 200, "top1": 80.0},
                                                         {"epoch": 2, "wall_s": 400, "top1": 85.0}],
                           target_top1=85.0, best_top1=85.0, time_to_target_s=400.0, core_s_to_target=800.0,
                           wall_s=410.0, core_s=820.0)
    ours = _tta_record(tta.OURS_PROGRAM, "ours-1", [{"epoch": 1, "wall_s": 190, "top1": 86.0}], target_top1=85.0,
                       best_top1=86.0, best_top1_in_budget=86.0, time_to_target_s=190.0, core_s_to_target=370.0,
                       wall_s=420.0, core_s=840.0, budget_s=410.0)
    text = tta_report.section([examples, ours], tmp_path / "figures")
    assert (tmp_path / "figures" / "time_to_accuracy.png").stat().st_size > 0
    assert "ratio **2.11** in wall time (met), **2.16** in CPU seconds" in text and "goal: at least 2)" in text
    assert "Best top-1 within main.py's wall time" in text and "goal: at least 92 %" in text
    assert "| ResNet18 | normalisation" in text and "haven't yet tested" in text
    assert "`-b 128`" in text
    assert tta_report.section([], tmp_path / "figures") == ""
