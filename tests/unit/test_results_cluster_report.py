"""One cluster's report from fixture records: repeats folded into one clean line with its spread, one
panel per hardware kind, the summary's numbers; and the published-model study's binding term for the tag."""
import math
import re

from hpc_imagenet.harness.analysis.spread import aggregate
from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import cluster, training
from studies.published_model import cluster_model, cluster_section
from studies.published_model import formulas as scaling_model
from tests.helpers import REPORT_ENV as ENV
from tests.helpers import md_rows as _rows
from tests.helpers import train_record as _train
from tests.helpers import write_records as _write


def _ar(nbytes, t_us):
    m = {"bytes": nbytes, "time_us": t_us, "algbw_gbps": nbytes / t_us / 1e3, "busbw_gbps": nbytes / t_us / 1e3,
         "world_size": 2}
    return records.make_record("allreduce", "c-ar-1", {"backend": "gloo", "world_size": 2, "bytes": nbytes}, m, ENV)


def test_repeated_node_counts_fold_into_one_line_with_their_spread(tmp_path):
    # two sweeps of 1-2-4 nodes (the second a repeat), as a resumed or rerun `bench scaling` leaves them
    recs = [_train("c-train-1", n, r) for n, r in ((1, 100.0), (2, 180.0), (4, 300.0))]
    recs += [_train("c-train-2", n, r) for n, r in ((1, 110.0), (2, 190.0), (4, 340.0))]
    readme, head = cluster.build_tag("c", _write(tmp_path / "c.jsonl", recs), tmp_path / "c")
    series = training.train_series(records.load_typed([tmp_path / "c.jsonl"])[0])
    assert len(series) == 1  # one configuration: one line, not one per sweep
    pts = next(iter(series.values()))
    assert [p.x for p in pts] == [1, 2, 4] and [p.n for p in pts] == [2, 2, 2]  # x strictly increasing: no zig-zag
    assert pts[2].mean == 320.0 and abs(pts[2].std - 28.2843) < 1e-3  # sample std of 300 and 340
    rows = _rows(readme.read_text(), "| series | hardware | GPUs")
    assert [(r["GPUs"], r["repeats"], r["images/s"], r["efficiency"]) for r in rows] == [
        ("1", "2", "105", "100.0%"), ("2", "2", "185", "88.1%"), ("4", "2", "320", "76.2%")]
    assert head["best"][0] == "320 images/s" and head["efficiency"][0] == "76.2%"
    text = readme.read_text()
    assert "**320 images/s**" in text and "**76.2%**" in text
    assert {p.name for p in (tmp_path / "c").glob("*.png")} == {"training_throughput.png", "training_time.png"}
    _, binding = cluster_section.model_section("c", series, [], [], [], tmp_path / "study")
    assert binding == "compute (all-reduce not measured)"  # no allreduce records under this tag
    # no time-to-accuracy figure: ResNet-18 at 64 px is not what the cited recipe reached its target with
    assert {p.name for p in (tmp_path / "study").glob("*.png")} == {"scaling_model-c.png"}


def test_each_hardware_kind_gets_its_own_panel(tmp_path):
    other = dict(ENV, cpu_model="Other CPU")
    recs = ([_train("c-train-1", n, 100.0 * n) for n in (1, 2)]
            + [_train("c-train-2", n, 50.0 * n, other) for n in (1, 2)])
    series = training.train_series(records.load_typed([_write(tmp_path / "c.jsonl", recs)])[0])
    thr, hours = training.scaling_panels(series)
    assert [p["title"] for p in thr] == ["CPU: Other CPU", "CPU: Test CPU"] == [p["title"] for p in hours]
    assert all(len([s for s in p["series"] if s["label"] != "_nolegend_"]) == 2 for p in thr)  # line + ideal


def test_the_tags_allreduce_records_feed_the_models_binding_term(tmp_path):
    # a slow link: 25 MB takes 0.5 s, far longer than the 0.16 s step
    recs = [_train("c-train-1", n, 100.0 * n * (0.9 if n > 1 else 1)) for n in (1, 2)]
    recs += [_ar(b, 20.0 + b / 50.0) for b in (1 << 10, 1 << 16, 1 << 20, 25 << 20)]
    typed = records.load_typed([_write(tmp_path / "c.jsonl", recs)])[0]
    text, binding = cluster_section.model_section("c", training.train_series(records.by_kind(typed, "train")),
                                                  records.by_kind(typed, "allreduce"), [], [], tmp_path)
    assert binding == "all-reduce"
    rows = _rows(text, "| GPUs | measured images/s")
    assert rows[0]["binding"] == "compute" and rows[1]["binding"] == "all-reduce"
    assert float(rows[1]["exposed all-reduce (ms/step)"]) > 100


def test_aggregate_keeps_single_points_without_spread():
    pts = aggregate([{"x": 1, "y": 5.0}, {"x": 2, "y": 7.0}, {"x": 2, "y": 9.0}], lambda r: r["x"], lambda r: r["y"])
    assert [(p.x, p.mean, p.std, p.n) for p in pts] == [(1, 5.0, 0.0, 1), (2, 8.0, pts[1].std, 2)]
    assert re.fullmatch(r"1\.414\d*", f"{pts[1].std}")


def test_a_series_trained_with_a_recipe_names_it():
    plain = _train("c-1", 1, 100.0)
    assert "recipe" not in training.series_name(kinds.from_dict(plain))
    for flags in (["--recipe", "ffcv-16"], ["--recipe=ffcv-16"]):
        with_recipe = _train("c-1", 1, 100.0)
        with_recipe["point"]["extra_args"] = ["--lr", "1.7", *flags]
        assert training.series_name(kinds.from_dict(with_recipe)).endswith(", recipe ffcv-16")


def test_a_miss_past_ten_percent_names_the_term_that_misses():
    whole = scaling_model.WholeStep(scaling_model.ModelInputs(step_time_s=0.1, batch_per_gpu=32, grad_bytes=1e8,
                                                              busbw_intra=math.inf))
    row = {"efficiency": 1.0, "binding": "compute"}
    rows = [{**row, "gpus": 1, "measured": 320.0, "predicted": 320.0, "error": 0.0, "exposed_comm_ms": 0.0,
             "straggler_ms": 0.0},
            {**row, "gpus": 2, "measured": 600.0, "predicted": 640.0, "error": 0.0667, "exposed_comm_ms": 0.0,
             "straggler_ms": 0.0},  # within 10 %: agrees
            {**row, "gpus": 4, "measured": 800.0, "predicted": 1280.0, "error": 0.6, "exposed_comm_ms": 0.0,
             "straggler_ms": 0.0},  # optimistic: a cost without a term
            {**row, "gpus": 8, "measured": 2000.0, "predicted": 1600.0, "error": -0.2, "exposed_comm_ms": 40.0,
             "straggler_ms": 5.0}]  # pessimistic: its largest term is too large
    pred = cluster_model.Prediction(whole, None, rows, ["all-reduce (no allreduce records)"], {})
    found = cluster_model.misses(pred)
    assert [(m.gpus, m.measured_ms, m.predicted_ms) for m in found] == [(4, 160.0, 100.0), (8, 128.0, 160.0)]
    assert found[0].term == "a cost with no term here: all-reduce (no allreduce records)"
    assert found[1].term == "its exposed all-reduce term (40.0 ms a step) is too large"
    agreeing = cluster_model.Prediction(whole, None, rows[:2], [], {})
    assert cluster_model.misses(agreeing) == []


def test_where_a_step_goes_names_what_held_it():
    def point(sweep, wait, host, device, gpu=None):
        rec = _train(sweep, 1, 1000.0, {**ENV, "gpu_name": gpu})
        rec["metrics"].update(data_wait_ms=wait, host_ms=host, device_ms=device)
        return kinds.from_dict({**rec, "_source": f"t.jsonl:{sweep}"})
    recs = [point("loader", 30.0, 10.0, None), point("cpu", 0.5, 20.0, None),
            point("launches", 0.2, 12.0, 12.5, "H200"), point("gpu", 0.2, 3.0, 12.5, "H200")]
    text = training.breakdown_section(recs)
    held = {row["record"].split(":")[1]: row["held by"] for row in _rows(text, "| configuration")}
    assert held == {"loader": "the loader", "cpu": "the CPU's arithmetic",
                    "launches": "the host (the GPU waits for its launches)", "gpu": "the GPU's arithmetic"}
    assert training.breakdown_section([point("old", None, None, None)]) == ""  # records from before the breakdown
