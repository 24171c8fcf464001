"""Predicted time to accuracy (the published-model study): the arithmetic in closed form, the check against
published times (every point printed with its terms and error), and the prediction for one tag."""
import math
import re
import runpy
import sys

import pytest

from hpc_imagenet.harness.core import records
from studies.published_model import REFERENCE, cluster_section
from studies.published_model import __main__ as command
from studies.published_model import formulas as sm
from studies.published_model import predicted_tta
from studies.published_model import time_to_train as tta
from tests.helpers import md_rows as _rows
from tests.helpers import train_record as _train
from tests.helpers import write_records as _write

MLPERF = [tta.EpochsRow(3200, 35), tta.EpochsRow(40448, 70), tta.EpochsRow(1600, 35)]


def _model(step_s=0.3, batch=256):
    """A cluster with free communication: images/s = n b / t_c exactly."""
    return sm.WholeStep(sm.ModelInputs(step_time_s=step_s, batch_per_gpu=batch, grad_bytes=1e8, busbw_intra=math.inf))


def test_epochs_hold_below_the_smallest_batch_interpolate_in_log_batch_and_stop_above_the_largest():
    rows = sorted(MLPERF, key=lambda r: r.global_batch)
    assert tta.epochs_at(rows, 64) == 35 and tta.epochs_at(rows, 3200) == 35
    geometric_mid = math.sqrt(3200 * 40448)
    assert tta.epochs_at(rows, geometric_mid) == pytest.approx(52.5)
    assert tta.epochs_at(rows, 40448) == pytest.approx(70)
    assert tta.epochs_at(rows, 40449) is None
    with pytest.raises(ValueError):
        tta.epochs_at([], 256)


def test_recipe_rows_come_sorted_from_the_cited_table():
    ref = predicted_tta.reference()
    rows = tta.recipe_rows(ref["recipes"]["mlperf"])
    assert [r.global_batch for r in rows] == sorted(r.global_batch for r in rows)
    assert tta.epochs_at(rows, 3200) == 35  # NVIDIA's 8 x H100 v4.0 logs: 75.9 % at epoch 35


def test_evaluations_count_the_pass_that_finds_the_target():
    assert tta.evaluations(35, 4) == 9 and tta.evaluations(77, 4) == 20 and tta.evaluations(90, 1) == 90


def test_ffcv_resolution_schedule_and_its_mean_pixel_factor():
    # rn50_16_epochs.yaml: 160 px up to epoch 11, 192 px from 13; epoch 12 interpolates to 176, rounded to 192
    res = [tta.scheduled_resolution(e, 160, 192, 11, 13) for e in range(16)]
    assert res == [160] * 12 + [192] * 4
    want = (12 * (160 / 224) ** 2 + 4 * (192 / 224) ** 2) / 16
    assert tta.mean_pixel_factor(16, 160, 192, 11, 13) == pytest.approx(want)
    # the cited config: the same schedule, and validation at 256 px with a flipped second pass
    train, val = tta.ffcv_factors(predicted_tta.reference()["recipes"]["ffcv_rn50"], 16)
    assert (train, val) == (pytest.approx(want), pytest.approx(2 * (256 / 224) ** 2))


def test_time_is_epochs_times_images_over_rate_plus_the_evaluations():
    t = tta.time_to_accuracy(1_281_167, 2, evals=3, eval_per_s=50_000)
    assert (t["train_s"], t["eval_s"], t["total_s"]) == (2.0, 3.0, 5.0)
    with pytest.raises(ValueError):
        tta.time_to_accuracy(1000, 1, evals=1)


def test_evaluation_costs_the_forward_share_of_a_step():
    w = _model(step_s=0.3, batch=256)  # f = 2/3: a forward pass is 0.1 s for 256 images
    assert tta.eval_images_per_s(w, 4) == pytest.approx(4 * 2560)
    assert tta.eval_images_per_s(w, 1, factor=(256 / 224) ** 2) == pytest.approx(2560 / (256 / 224) ** 2)


def test_predicted_series_in_closed_form():
    rows = tta.predict_series(_model(), [1, 8, 256], sorted(MLPERF, key=lambda r: r.global_batch), 4)
    one, eight, many = rows
    assert one["images_per_s"] == pytest.approx(256 / 0.3) and one["epochs"] == 35 and one["evals"] == 9
    want = 35 * 1_281_167 / (8 * 256 / 0.3) + 9 * 50_000 / (8 * 256 / 0.1)
    assert eight["total_s"] == pytest.approx(want)
    assert many["global_batch"] == 65_536 and many["epochs"] is None and "total_s" not in many


def test_a_point_inside_the_published_rounding_counts_as_within():
    point = {"name": "p", "hardware": "A100", "gpus": 1, "global_batch": 256, "epochs": 90, "evals": 0,
             "published_s": [4 * 3600], "rounded_to_s": 3600, "counts_eval": False}
    row = tta.point_row(point, tta.Throughput(_model(), "m"))  # 90 epochs at 853 images/s: 37.5 h, far off
    assert row["error"] == pytest.approx((row["total_s"] - 4 * 3600) / (4 * 3600)) and not row["within"]
    near = tta.point_row(point, tta.Throughput(_model(step_s=0.3 * 4 * 3600 / row["total_s"] * 1.11), "m"))
    assert abs(near["error"]) > sm.CHECK_TOLERANCE and near["within"]  # 4.44 h: "~4 h" rounds it to the hour
    missing = tta.point_row(point, tta.Throughput(None, "-", "an A100 step time"))
    assert "error" not in missing and missing["missing"] == "an A100 step time"


def test_the_check_prints_every_published_point_with_its_terms_and_error(capsys):
    code = command.run_time_check([records.RECORDS_DIR], REFERENCE)
    out = capsys.readouterr().out
    ref = predicted_tta.reference()
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    for point in ref["time_to_train"]:
        assert point["name"] in lines, f"{point['name']} not printed"
    # recompute each printed error from its printed predicted and published seconds
    predicted = 0
    for point in ref["time_to_train"]:
        cells = lines[point["name"]].split()
        errors = [c for c in cells if c.endswith("%")]
        if errors:
            predicted += 1
            pred_s, pub_s = (float(c) for c in cells[cells.index(errors[0]) - 2:cells.index(errors[0])])
            assert float(errors[0][:-1]) == pytest.approx(100 * (pred_s - pub_s) / pub_s, abs=0.2)
    assert predicted >= 14  # DLE and FFCV always have a model; MLPerf's 1 node with the committed H100 record
    assert f"of {predicted} predicted points are within" in out
    assert "MLPerf v4.0 NVIDIA eos, 8 nodes: not predicted. Missing: the inter-node" in out
    misses = re.findall(r"^- .*: [+-]\d+\.\d% \(", out, re.M)  # "- NAME: +12.3% (..." per miss
    assert code == (1 if misses else 0)


def test_without_an_h100_record_the_check_names_the_measurement_it_needs(capsys):
    command.run_time_check([], REFERENCE)
    out = capsys.readouterr().out
    assert "MLPerf v4.0 NVIDIA eos, 1 node: not predicted. Missing: one H100's ResNet-50 images/s" in out


def test_the_check_reads_the_records_the_write_up_reads(capsys):
    """Without --records the check's overlap input is the benches' overlap record, as in the write-up."""
    command.main(["--check"])
    assert re.search(r"Overlap: h = \d+% from overlap\.jsonl:\d+", capsys.readouterr().out)


def test_the_command_line_runs_the_check(capsys, tmp_path, monkeypatch):
    # python -m studies.published_model --check-time-to-accuracy --records (none), in this process
    monkeypatch.setattr(sys, "argv", ["studies.published_model", "--check-time-to-accuracy", "--records"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("studies.published_model", run_name="__main__")
    assert done.value.code in (0, 1)
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["published", "hardware"]
    monkeypatch.setattr(sys, "argv", ["studies.published_model", "--check-time-to-accuracy", "--records",
                                      str(tmp_path / "absent")])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("studies.published_model", run_name="__main__")
    assert done.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def _resnet50(sweep, nodes, rate):
    """A ResNet-50 point at 224 px and 256 images a GPU: the model and size MLPerf's runs were published at."""
    rec = _train(sweep, nodes, rate)
    rec["point"].update(arch="resnet50", image_size=224, batch_size=256)
    rec["metrics"]["step_time_ms"] = 256e3 / (rate / nodes)
    return rec


def _tag_section(tmp_path, recs) -> str:
    """The study's prediction for one tag of RECS (a records file c.jsonl), figures in tmp_path/c."""
    return cluster_section.section({"c": records.load_typed([_write(tmp_path / "c.jsonl", recs)])[0]}, tmp_path / "c")


def test_cluster_report_predicts_only_where_the_cited_recipe_reached_the_target(tmp_path):
    recs = [_resnet50("c-train-1", n, r) for n, r in ((1, 100.0), (2, 200.0), (4, 400.0))]
    text = _tag_section(tmp_path, recs)
    rows = _rows(text, "| GPUs | global batch | predicted images/s | epochs")
    # global batch 256 n: only 8 GPUs (2,048) lies within the published runs' 1,600-57,344
    assert [(r["GPUs"], r["epochs"]) for r in rows] == [("1", "-"), ("2", "-"), ("4", "-"), ("8", "35.0")]
    assert "no prediction outside 1,600-57,344, where no published run reached the target" in text
    # t_c = 256 / 100 s with free communication: 35 epochs at 100 n images/s, 9 passes at 300 n
    want_h = (35 * 1_281_167 / (100 * 8) + 9 * 50_000 / (300 * 8)) / 3600
    assert float(rows[-1]["time to 75.9 % (h)"]) == pytest.approx(want_h, rel=1e-3)
    assert (tmp_path / "c" / "time_to_accuracy-c.png").exists()


def test_cluster_report_says_why_it_predicts_nothing_for_another_model(tmp_path):
    recs = [_train("c-train-1", n, r) for n, r in ((1, 100.0), (2, 200.0), (4, 400.0))]  # ResNet-18 at 64 px
    text = _tag_section(tmp_path, recs)
    assert ("No prediction: the measured configuration trains resnet18 at 64 px, and the cited recipe (MLPerf "
            "Training ResNet-50 (LARS), target 75.9 % top-1) reaches its target with resnet50 at 224 px only") in text
    assert "| GPUs | global batch | predicted images/s | epochs" not in text
    assert not (tmp_path / "c" / "time_to_accuracy-c.png").exists()
