"""The scaling model and the all-reduce arithmetic against values computed by hand."""
import copy
import json
import math
from dataclasses import replace

import pytest

from hpc_imagenet.harness.analysis import allreduce_fit
from hpc_imagenet.harness.analysis.allreduce_fit import bus_factor, fit_alpha_beta
from hpc_imagenet.harness.core import kinds
from hpc_imagenet.harness.core.kinds import AllreduceMetrics
from hpc_imagenet.harness.runners.allreduce_bench import sizes
from studies.common.overlap import hidden_fraction
from studies.published_model import __main__ as check_cli
from studies.published_model import formulas as sm
from studies.published_model import whole_step as ws
from studies.published_model import whole_step_section as ws_report

# t_c = 0.1 s, batch 32, 100 MB of gradients, 10 GB/s inside a node of 2, 1 GB/s between nodes,
# no latency, one bucket per 1 GB (a single all-reduce call).
M = sm.ModelInputs(step_time_s=0.1, batch_per_gpu=32, grad_bytes=100e6, busbw_intra=10e9, gpus_per_node=2,
                   busbw_inter=1e9, bucket_bytes=1e9)


def test_one_gpu_has_no_communication():
    p = sm.predict(M, 1, sm.NO_OVERLAP)
    assert p["comm_time_s"] == 0 and p["efficiency"] == 1 and p["images_per_s"] == pytest.approx(320)


def test_two_gpus_inside_a_node_by_hand():
    # comm = 2*(2-1)/2 * 1e8 / 1e10 = 0.01 s; no overlap: 0.11 s per step
    p = sm.predict(M, 2, sm.NO_OVERLAP)
    assert p["comm_time_s"] == pytest.approx(0.01)
    assert p["images_per_s"] == pytest.approx(2 * 32 / 0.11)
    assert p["efficiency"] == pytest.approx(0.1 / 0.11)
    # overlap: 0.1/3 + max(0.2/3, 0.01) = 0.1 -> fully hidden
    assert sm.predict(M, 2, sm.FULL_OVERLAP)["efficiency"] == pytest.approx(1.0)


def test_four_gpus_cross_the_slow_link_by_hand():
    # comm = 2*3/4 * 1e8 / 1e9 = 0.15 s; no overlap 0.25 s; overlap 0.1/3 + 0.15 s
    assert sm.comm_time(M, 4) == pytest.approx(0.15)
    assert sm.step_time(M, 4, sm.NO_OVERLAP) == pytest.approx(0.25)
    assert sm.step_time(M, 4, sm.FULL_OVERLAP) == pytest.approx(0.1 / 3 + 0.15)
    assert sm.predict(M, 4, sm.NO_OVERLAP)["images_per_s"] == pytest.approx(4 * 32 / 0.25)


def test_no_hidden_fraction_is_the_fully_exposed_formula():
    # h = 0: t_c + t_comm(n) exactly, inside a node and across the slow link
    for n in (1, 2, 3, 4, 16, 1024):
        assert sm.step_time(M, n, 0.0) == pytest.approx(M.step_time_s + sm.comm_time(M, n), rel=1e-12)
        assert sm.predict(M, n, 0.0)["exposed_comm_s"] == pytest.approx(sm.comm_time(M, n), rel=1e-12)


def test_full_hidden_fraction_leaves_only_what_backward_cannot_cover():
    f, tc = M.backward_fraction, M.step_time_s
    for n in (2, 4, 64):
        tm = sm.comm_time(M, n)
        # h = 1: the old ideal-overlap formula, (1-f) t_c + max(f t_c, t_comm)
        assert sm.step_time(M, n, 1.0) == pytest.approx((1 - f) * tc + max(f * tc, tm), rel=1e-12)
        assert sm.predict(M, n, 1.0)["exposed_comm_s"] == pytest.approx(max(0.0, tm - f * tc), abs=1e-15)
    assert sm.predict(M, 2, 1.0)["exposed_comm_s"] == 0  # 0.01 s hides behind 0.0667 s of backward
    assert sm.predict(M, 4, 1.0)["exposed_comm_s"] == pytest.approx(0.15 - 0.2 / 3)  # only the cap's excess


def test_measured_hidden_fraction_by_hand():
    # n = 4: t_comm = 0.15 s, backward f t_c = 0.0667 s
    # h = 0.25: hidden 0.0375 s (under the cap) -> 0.1 + 0.15 - 0.0375 = 0.2125 s
    assert sm.step_time(M, 4, 0.25) == pytest.approx(0.2125)
    # h = 0.5: 0.075 s would hide, but backward lasts only 0.2/3 s -> 0.1 + 0.15 - 0.2/3
    assert sm.step_time(M, 4, 0.5) == pytest.approx(0.25 - 0.2 / 3)
    ts = [sm.step_time(M, 4, h) for h in (0.0, 0.1, 0.25, 0.4, 1.0)]
    assert ts == sorted(ts, reverse=True)  # more hidden, never slower
    with pytest.raises(ValueError, match="not in"):
        sm.step_time(M, 4, 1.5)
    with pytest.raises(ValueError, match="not in"):
        sm.step_time(M, 4, -0.1)


def test_hidden_fraction_from_an_overlap_measurement():
    assert hidden_fraction(10.0, 40.0) == pytest.approx(0.75)
    assert hidden_fraction(84.3, 32.0) == 0.0  # exposed beyond the all-reduce alone: nothing hidden
    assert hidden_fraction(0.0, 32.0) == 1.0
    with pytest.raises(ValueError):
        hidden_fraction(1.0, 0.0)


def test_latency_term_counts_buckets_and_hops():
    m = sm.ModelInputs(step_time_s=1, batch_per_gpu=1, grad_bytes=50e6, busbw_intra=1e12, alpha_intra_s=1e-5,
                       bucket_bytes=20e6)
    # 3 buckets * 2*(8-1) hops * 10 us + 2*7/8 * 5e7 / 1e12
    assert sm.comm_time(m, 8) == pytest.approx(3 * 14 * 1e-5 + 1.75 * 5e7 / 1e12)


def test_calibrate_recovers_the_compute_time():
    measured = sm.step_time(M, 4, sm.NO_OVERLAP)
    got = sm.calibrate(sm.ModelInputs(**{**M.__dict__, "step_time_s": 1.0}), 4, measured, sm.NO_OVERLAP)
    assert got.step_time_s == pytest.approx(0.1, rel=1e-9)
    got = sm.calibrate(sm.ModelInputs(**{**M.__dict__, "step_time_s": 1.0}), 4, 0.2125, 0.25)
    assert got.step_time_s == pytest.approx(0.1, rel=1e-9)


def test_bus_factor_and_fit_like_nccl_tests():
    assert bus_factor(2) == 1.0 and bus_factor(8) == pytest.approx(1.75)
    assert sizes(4, 64, 4) == [4, 16, 64]
    # exact t = 50 us + S * 1.5 / 2e9 for n = 4: fit returns bandwidth 2e9 and the smallest time
    rows = [AllreduceMetrics(bytes=s, world_size=4, time_us=50 + s * 1.5 / 2e9 * 1e6) for s in (4096, 1 << 20, 1 << 24)]
    fit = fit_alpha_beta(rows)
    assert fit["busbw_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert fit["alpha_s"] == pytest.approx(rows[0].time_us * 1e-6)
    assert allreduce_fit.hop_latency(fit["alpha_s"], 4) == pytest.approx(fit["alpha_s"] / 6)


def test_relative_error_sign():
    assert sm.relative_error(110, 100) == pytest.approx(0.1)
    assert math.isclose(sm.relative_error(90, 100), -0.1)


# ---------------------------------------------------------------- the whole step: stragglers, pipeline, storage

def test_expected_max_by_hand():
    # sorted 1..4, P(max of 2 = x_i) = ((2i-1)/16): (1*1 + 2*3 + 3*5 + 4*7) / 16 = 50/16
    assert sm.expected_max([4, 2, 1, 3], 2) == pytest.approx(50 / 16)
    assert sm.expected_max([4, 2, 1, 3], 1) == pytest.approx(2.5)
    assert sm.straggler_factor([1, 2, 3, 4], 2) == pytest.approx(50 / 16 / 2.5)
    assert sm.straggler_factor([1, 2, 3, 4], 1) == 1.0 and sm.straggler_factor([], 64) == 1.0
    assert sm.expected_max([1, 2, 3, 4], 10_000) == pytest.approx(4.0)  # never beyond the sample's maximum


def test_straggler_wait_is_added_to_the_step_and_named_when_largest():
    # n = 2 in one node: exposed all-reduce 0.01 s; stragglers 0.1 * (1.25 - 1) = 0.025 s; t = 0.135 s
    w = sm.WholeStep(M, sm.NO_OVERLAP, step_samples=(1.0, 2.0, 3.0, 4.0))
    p = sm.breakdown(w, 2)
    assert p["straggler_s"] == pytest.approx(0.025) and p["exposed_comm_s"] == pytest.approx(0.01)
    assert p["step_time_s"] == pytest.approx(0.135) and p["images_per_s"] == pytest.approx(64 / 0.135)
    assert p["binding"] == "stragglers"
    # with equal steps there is nothing to wait for: the all-reduce is the only loss
    assert sm.breakdown(replace(w, step_samples=(2.0, 2.0)), 2)["binding"] == "all-reduce"


def test_one_gpu_without_ceilings_is_bound_by_compute():
    p = sm.breakdown(sm.WholeStep(M, step_samples=(1.0, 3.0)), 1)
    assert p["binding"] == "compute" and p["images_per_s"] == pytest.approx(320) and p["straggler_s"] == 0


def test_input_pipeline_ceiling_by_hand():
    # 2 loader cores x 100 images/s per node; GPUs would take 64 / 0.11 = 582 images/s on one node
    w = sm.WholeStep(M, pipeline=sm.Pipeline(loader_cores_per_node=2, images_per_core_s=100))
    p = sm.breakdown(w, 2)
    assert p["images_per_s"] == pytest.approx(200) and p["binding"] == "input pipeline"
    assert p["data_wait_s"] == pytest.approx(64 / 200 - 0.11)
    assert sm.breakdown(w, 4)["images_per_s"] == pytest.approx(400)  # two nodes, two pipelines
    assert sm.breakdown(replace(w, pipeline=sm.Pipeline(2, 1000)), 2)["binding"] == "all-reduce"  # 2000 > 582


def test_storage_is_an_epoch_level_bound_by_hand():
    # n = 2, batch 32, 640 images an epoch: 10 steps of 0.11 s (t_c + exposed 0.01 s) = 1.1 s.
    # 30 MB/s and 100 kB an image: 640 images need 2.13 s, longer than the epoch: it binds, every
    # step stretched to 0.213 s = 300 images/s. 250 opens/s: 2.56 s, longer still: the opens bind.
    ep = sm.Epoch(images=640)
    st = sm.Storage(bytes_per_image=100e3, read_bytes_per_s=30e6, opens_per_s=250)
    p = sm.breakdown(sm.WholeStep(M, storage=st, epoch=ep), 2)
    assert p["steps"] == 10 and p["storage_epoch_s"] == {"storage bandwidth": pytest.approx(640 * 100e3 / 30e6),
                                                         "storage opens": pytest.approx(640 / 250)}
    assert p["images_per_s"] == pytest.approx(250) and p["binding"] == "storage opens"
    assert p["storage_wait_s"] == pytest.approx(0.256 - 0.11)
    p = sm.breakdown(sm.WholeStep(M, storage=replace(st, opens_per_s=None), epoch=ep), 2)
    assert p["images_per_s"] == pytest.approx(300) and p["binding"] == "storage bandwidth"
    # a rate that reads the epoch faster than the GPUs train it bounds nothing (not a steady cap)
    fast = sm.Storage(bytes_per_image=100e3, read_bytes_per_s=100e6)
    p = sm.breakdown(sm.WholeStep(M, storage=fast, epoch=ep), 2)
    assert p["images_per_s"] == pytest.approx(64 / 0.11) and p["storage_wait_s"] == 0 and p["binding"] == "all-reduce"


def test_loader_restart_is_spread_over_the_timed_steps_by_hand():
    # 640 images on 2 GPUs of batch 32: 10 steps; timer read every 4 steps -> 8 timed steps.
    # R = 0.8 s: (0.8 + 8 x 0.11) / 8 = 0.21 s per timed step -> 64 / 0.21 images/s
    ep = sm.Epoch(images=640, restart_s=0.8, timed_every=4)
    assert (ep.steps(2, 32), ep.timed_steps(2, 32)) == (10, 8)
    p = sm.breakdown(sm.WholeStep(M, epoch=ep), 2)
    assert p["restart_per_step_s"] == pytest.approx(0.1) and p["timed_steps"] == 8
    assert p["images_per_s"] == pytest.approx(64 / 0.21) and p["binding"] == "loader restart"
    assert p["epoch_s"] == pytest.approx(0.8 + 10 * 0.11)
    # ten times the images: 100 steps, all timed, share it (more GPUs: fewer steps, a larger share)
    ten_times = sm.breakdown(sm.WholeStep(M, epoch=replace(ep, images=6400)), 2)
    assert ten_times["restart_per_step_s"] == pytest.approx(0.008)
    # the epoch bound counts the restart: 2.0 s of reading fits in 0.8 s + 1.1 s of steps? no -> 0.12 s/step
    st = sm.Storage(bytes_per_image=100e3, read_bytes_per_s=640 * 100e3 / 2.0)
    p = sm.breakdown(sm.WholeStep(M, storage=st, epoch=ep), 2)
    assert p["epoch_s"] == pytest.approx(2.0) and p["storage_wait_s"] == pytest.approx(0.12 - 0.11)
    # padded samples count: 3 images on 2 ranks are 2 a rank, one batch each
    assert sm.Epoch(images=3).steps(2, 32) == 1 and sm.Epoch(images=3, drop_last=True).steps(2, 32) == 0


def test_pipeline_counts_the_workers_of_the_gpus_in_use():
    # 8 workers a GPU, 40 cores a node of 8 GPUs, 100 images/s a core
    pipe = sm.Pipeline(40, 100.0, workers_per_gpu=8)
    assert pipe.capacity(1, 8) == pytest.approx(800)  # one GPU: its 8 workers
    assert pipe.capacity(8, 8) == pytest.approx(4000)  # 64 workers share 40 cores
    assert pipe.capacity(12, 8) == pytest.approx(4000 + 3200)  # a full node and one of 4 GPUs
    assert sm.Pipeline(40, 100.0).capacity(1, 8) == pytest.approx(4000)  # no worker count: every core


def test_calibrate_whole_recovers_t_c_and_refuses_large_points():
    w = sm.WholeStep(M, step_samples=(1.0, 2.0, 3.0, 4.0))
    x = sm.breakdown(w, 2)["images_per_s"]
    assert sm.calibrate_whole(replace(w, inputs=replace(M, step_time_s=1.0)), 2, x).inputs.step_time_s == \
        pytest.approx(0.1)
    with pytest.raises(ValueError, match="at most 4"):
        sm.calibrate_whole(w, 8, x)
    with pytest.raises(ValueError, match="input pipeline caps"):  # a ceiling below the point: t_c unknowable
        sm.calibrate_whole(replace(w, pipeline=sm.Pipeline(1, 10)), 2, x)


def test_with_batch_keeps_compute_per_image():
    w = sm.with_batch(sm.WholeStep(M), 64)
    assert w.inputs.batch_per_gpu == 64 and w.inputs.step_time_s == pytest.approx(0.2)


# ---------------------------------------------------------------- the check against published points

def _reference():
    from studies.published_model import load_reference
    return load_reference()


def _published_from_model(pub, links):
    """A copy of the published tables whose numbers are the model's own predictions (error 0)."""
    pub = copy.deepcopy(pub)
    rows = ws.check_rows(ws.cases(pub, links, ws.Measured()))
    pred = {(r["case"], r["gpus"]): r["predicted"] for r in rows}
    for run in pub["hal_2020"]["runs"]:
        run["train_img_per_s"] = [pred.get((f"HAL 2020 {run['label']}", n), x)
                                  for n, x in zip(run["gpus"], run["train_img_per_s"])]
    for config, pts in pub["nvidia_dle_2021"]["train_img_per_s"].items():
        for n in pts:
            pts[n] = pred.get((f"NVIDIA DLE {config}", int(n)), pts[n])
    return pub


def _write_reference(tmp_path, pub, links):
    (tmp_path / "published_resnet50.json").write_text(json.dumps(pub))
    (tmp_path / "links.json").write_text(json.dumps(links))
    return tmp_path


def test_check_exit_code_on_constructed_published_points(tmp_path, capsys):
    pub, links = _reference()
    exact = _published_from_model(pub, links)
    assert check_cli.main(["--check", "--records", "--reference", str(_write_reference(tmp_path, exact, links))]) == 0
    assert "Every published point is within 10%" in capsys.readouterr().out
    off = copy.deepcopy(exact)
    may = next(r for r in off["hal_2020"]["runs"] if r["label"] == "may")
    may["train_img_per_s"][-1] *= 0.85  # the model is now 1/0.85 - 1 = +17.6% at 64 GPUs
    assert check_cli.main(["--check", "--records", "--reference", str(_write_reference(tmp_path, off, links))]) == 1
    out = capsys.readouterr().out
    assert "HAL 2020 may at 64 GPUs: +17.6%" in out
    nine = copy.deepcopy(exact)
    next(r for r in nine["hal_2020"]["runs"] if r["label"] == "may")["train_img_per_s"][-1] /= 1.09
    assert check_cli.main(["--check", "--records", "--reference", str(_write_reference(tmp_path, nine, links))]) == 0


def test_check_prints_every_published_point_with_its_terms_band_and_named_misses(capsys):
    pub, links = _reference()
    code = check_cli.main(["--check"])  # the committed records: this project's PIL rate per core feeds them
    out = capsys.readouterr().out
    hal_points = sum(len(r["gpus"]) for r in pub["hal_2020"]["runs"])
    dle_points = sum(len(v) for v in pub["nvidia_dle_2021"]["train_img_per_s"].values())
    table = [line for line in out.splitlines() if line.startswith(("HAL 2020 ", "NVIDIA DLE "))]
    assert len(table) == hal_points + dle_points == 19
    assert all(any(t in line for t in sm.TERMS) for line in table)
    assert all(".." in line and "%" in line for line in table)  # the error band from the cited ranges
    header = out.splitlines()[2]
    assert all(h in header for h in ("loader restart ms/step", "storage read s/epoch", "error band"))
    within = int(out.split(" of 19 published points are within 10%")[0].rsplit("\n", 1)[-1])
    assert within >= 16
    misses = [line for line in out.splitlines() if line.startswith("- ")]
    assert len(misses) == 19 - within and code == (1 if misses else 0)
    # a point that honest inputs cannot reach names the measurement it lacks and the value it needs
    for line in misses:
        assert "Missing: " in line and "it needs " in line and " where the model has " in line
    named = {line.split(":")[0][2:] for line in misses}
    assert named <= {"HAL 2020 feb at 64 GPUs", "NVIDIA DLE A100_80GB_AMP at 8 GPUs",
                     "NVIDIA DLE V100_16GB_AMP at 8 GPUs"}
    dle = [line for line in misses if "NVIDIA DLE" in line]
    assert all("per-worker PIL decode" in line and "images/s per loader core" in line for line in dle)
    assert not dle or "At 1 GPU the same loaders fed at least" in out  # the other side of the bracket


def test_restart_term_is_in_the_hal_rows_and_not_in_dle():
    pub, links = _reference()
    rows = ws.check_rows(ws.cases(pub, links, ws.Measured()))
    hal = [r for r in rows if r["case"].startswith("HAL")]
    dle = [r for r in rows if r["case"].startswith("NVIDIA")]
    lo, hi = links["hal_2020"]["loader_restart_s"]["low"], links["hal_2020"]["loader_restart_s"]["high"]
    assert all(r["restart_s"] == pytest.approx((lo + hi) / 2) and r["restart_per_step_s"] > 0 for r in hal)
    assert all(r["restart_s"] == 0 for r in dle)  # DLE's workers persist
    big = next(r for r in hal if r["case"] == "HAL 2020 feb" and r["gpus"] == 64)
    small = next(r for r in hal if r["case"] == "HAL 2020 feb" and r["gpus"] == 8)
    assert (big["timed_steps"], big["steps"]) == (90, 97)  # timed every 10 steps: 7 untimed
    assert big["restart_per_step_s"] > 7 * small["restart_per_step_s"]  # weighs more as GPUs grow
    assert big["error_low"] < big["error"] < big["error_high"]  # the band comes from the cited ranges
    # February's storage: its own run peaked at 3.93 GB/s, May's at 4.77: at 3.93 the epoch bound binds
    assert big["error_low"] < sm.CHECK_TOLERANCE < big["error_high"]
    assert all(r["error_low"] == r["error_high"] == r["error"] for r in dle)  # no ranged input
    assert all(r["binding"] != "storage bandwidth" for r in hal)  # 4.77 GB/s reads an epoch in 31 s


def test_hal_inputs_follow_the_seed_scripts():
    pub, links = _reference()
    L = links["hal_2020"]
    assert L["hidden_fraction"] == 0.0 and "delay_allreduce=True" in L["hidden_fraction_source"]
    assert L["loader_workers_per_gpu"] == 20 and "80 loader workers a node" in L["loader_workers_source"]
    assert links["nvidia_dle_2021"]["loader_backend"] == "baseline"  # data_backend: pytorch, PIL, not DALI
    assert "7bdfc81d258746323bf0d3ca57e0ad302a4c3a74" in links["nvidia_dle_2021"]["source_commit"]
    got = ws.Measured(hidden_fraction=0.9, rates=(("baseline", 300.0, "r:1"),))
    hal, *_ = ws.hal_cases(pub, links, got)
    dle, *_ = ws.dle_cases(pub, links, got)
    assert hal.model.hidden_fraction == 0.0 and dle.model.hidden_fraction == 0.9  # apex delays; DDP overlaps
    assert hal.model.pipeline.capacity(4, 4) == pytest.approx(40 * 300.0)  # 80 workers on 40 cores
    assert hal.model.pipeline.capacity(2, 4) == pytest.approx(40 * 300.0)  # 2 processes: 40 workers
    assert dle.model.pipeline.capacity(1, 8) == pytest.approx(16 * 300.0)  # DGX A100: 16 workers a GPU


def test_own_runs_have_no_restart_term_and_the_report_says_what_a_start_costs():
    rec = _rec("train", "2026-01-01", {"data": "imagenet_like", "workers": 8},
               {"epochs_run": 1, "epoch_time_s": 12.0, "measured_steps": 40, "warmup_steps": 5, "step_time_ms": 100.0,
                "device": "cuda:0"}, "g:7")
    text = ws_report.own_runs_text([rec], 7.0, (64, 4000.0))
    assert "persistent_workers" in text and "restart term of its own runs is 0" in text
    assert "630 s of its 64-GPU run's 4000 s" in text  # 90 x 7 s inside the seed's timer
    assert "record g:7" in text and "7.5 s beyond its steps" in text  # 12 s - 45 x 0.1 s, once a run
    assert "record" not in ws_report.own_runs_text([replace(rec, point=kinds.TrainPoint(data="dummy", workers=8))], 7.0)


def test_predictions_do_not_depend_on_points_above_four_gpus():
    pub, links = _reference()
    altered = copy.deepcopy(pub)
    for run in altered["hal_2020"]["runs"]:
        run["train_img_per_s"] = [x * (0.5 if n > 4 else 1) for n, x in zip(run["gpus"], run["train_img_per_s"])]
    for pts in altered["nvidia_dle_2021"]["train_img_per_s"].values():
        for n in pts:
            pts[n] *= 0.5 if int(n) > 4 else 1

    def predictions(p):
        return [[sm.breakdown(c.model, n)["images_per_s"] for n in (1, 2, 4, 8, 16, 32, 64, 128)]
                for c in ws.cases(p, links, ws.Measured())]
    assert predictions(altered) == predictions(pub)
    assert all(c.calibration_gpus <= 4 for c in ws.cases(pub, links, ws.Measured()))


def test_step_times_recorder_on_cpu():
    import torch

    from hpc_imagenet.imagenet.train.metrics import StepTimes
    st = StepTimes(torch.device("cpu"), enabled=True, limit=3)
    st.mark(counted=False)
    for counted in (False, True, True, True, True):
        st.mark(counted)
    st.flush()
    assert len(st.ms) == 3 and all(t >= 0 for t in st.ms)  # the warm-up step left out, the limit kept
    off = StepTimes(torch.device("cpu"), enabled=False)
    off.mark(False), off.mark(True), off.flush()
    assert off.ms == []


def _rec(kind, time, point, metrics, source, sweep="s"):
    return kinds.from_dict({"kind": kind, "time": time, "point": point, "metrics": metrics, "_source": source,
                            "status": "ok", "sweep": sweep, "environment": {}})


def test_inputs_come_from_the_newest_matching_records():
    pipe = [_rec("pipeline", "2026-01-01", {"backend": "baseline", "image_size": 224, "workers": 0},
                 {"images_per_cpu_s": 500.0}, "old:1"),
            _rec("pipeline", "2026-02-01", {"backend": "baseline", "image_size": 224, "workers": 0},
                 {"images_per_cpu_s": 400.0}, "new:1"),
            _rec("pipeline", "2026-02-01", {"backend": "baseline", "image_size": 224, "workers": 2},
                 {"images_per_cpu_s": 300.0}, "new:2"),
            _rec("pipeline", "2026-03-01", {"backend": "baseline", "image_size": 64, "workers": 0},
                 {"images_per_cpu_s": 9000.0}, "small:1")]
    assert ws.pipeline_rates(pipe) == (("baseline", 300.0, "new:2"),)  # newest 224 px, the lower rate
    train = [_rec("train", "2026-01-01", {}, {"world_size": 1, "device": "cuda:0", "step_times_ms": [1, 2]}, "g:1"),
             _rec("train", "2026-02-01", {}, {"world_size": 2, "device": "cuda:0", "step_times_ms": [5, 9]}, "g:2"),
             _rec("train", "2026-02-01", {}, {"world_size": 1, "device": "cpu", "step_times_ms": [3, 4]}, "c:1"),
             _rec("train", "2026-03-01", {}, {"world_size": 1, "device": "cuda:0"}, "g:3")]
    got = ws.measured(train, pipe, [])
    assert got.samples("cuda") == ((1, 2), "g:1")  # one process only: a DDP rank's times include waits
    assert got.samples("cpu") == ((3, 4), "c:1") and got.rate("fast") == (None, None)
    assert got.rate(["dali", "baseline"]) == (300.0, "new:2")  # the first preference with a record


def test_report_section_has_one_row_per_published_point(tmp_path):
    pub, links = _reference()
    text = ws_report.section([], [], [], pub, links, tmp_path)
    rows = [line for line in text.splitlines() if line.startswith(("| HAL 2020 ", "| NVIDIA DLE "))]
    n = sum(len(r["gpus"]) for r in pub["hal_2020"]["runs"]) + sum(
        len(v) for v in pub["nvidia_dle_2021"]["train_img_per_s"].values())
    assert len(rows) == n and all(any(f"| {t} |" in r for t in sm.TERMS) for r in rows)
    assert (tmp_path / "scaling_model_terms.png").stat().st_size > 10_000
    assert "Missing: " in text or "Every published point" in text
    assert "restart term of its own runs is 0" in text and "| loader restart ms/step |" in text


def test_storage_ceiling_from_the_io_sweep_records():
    def rec(sweep, time, fmt, mb, files, src):
        return _rec("storage", time, {"format": fmt, "nodes": 2}, {"mb_per_s": mb, "files_per_s": files}, src, sweep)
    old = [rec("a", "2026-01-01", "imagefolder", 9000.0, 90000.0, "old:1")]
    new = [rec("b", "2026-02-01", "imagefolder", 500.0, 4000.0, "new:1"),
           rec("b", "2026-02-01", "imagefolder", 800.0, 7000.0, "new:2")]
    assert ws.storage_ceiling([], 1e5) is None
    assert ws.storage_ceiling(old + new, 1e5) == (800.0, 7000.0, 7000.0, "new:2")  # one open per image
    shards = [rec("c", "2026-03-01", "shards", 1000.0, 20.0, "sh:1")]
    assert ws.storage_ceiling(shards, 1e5) == (1000.0, 20.0, pytest.approx(10000.0), "sh:1")  # 1 GB/s / 100 kB


def test_bisect_finds_where_the_condition_turns_false():
    assert sm.bisect(lambda x: x * x < 2.0, 0.0, 2.0) == pytest.approx(math.sqrt(2.0))
    assert sm.bisect(lambda x: x < 300.0, 1e-3, 1e5, 80, geometric=True) == pytest.approx(300.0)
