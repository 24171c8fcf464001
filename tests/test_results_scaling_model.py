"""The scaling model and the all-reduce arithmetic against values computed by hand."""
import math

import pytest

from results import scaling_model as sm
from results.allreduce_bench import bus_factor, fit_alpha_beta, sizes

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
    assert sm.hidden_fraction(10.0, 40.0) == pytest.approx(0.75)
    assert sm.hidden_fraction(84.3, 32.0) == 0.0  # exposed beyond the all-reduce alone: nothing hidden
    assert sm.hidden_fraction(0.0, 32.0) == 1.0
    with pytest.raises(ValueError):
        sm.hidden_fraction(1.0, 0.0)


def test_table_has_all_three_overlap_assumptions():
    (row,) = sm.table(M, [4], hidden_fraction=0.25)
    assert row["images_per_s_no_overlap"] == pytest.approx(4 * 32 / 0.25)
    assert row["images_per_s_measured"] == pytest.approx(4 * 32 / 0.2125)
    assert row["images_per_s_overlap"] == pytest.approx(4 * 32 / (0.1 / 3 + 0.15))


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
    rows = [{"bytes": s, "world_size": 4, "time_us": 50 + s * 1.5 / 2e9 * 1e6} for s in (4096, 1 << 20, 1 << 24)]
    fit = fit_alpha_beta(rows)
    assert fit["busbw_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert fit["alpha_s"] == pytest.approx(rows[0]["time_us"] * 1e-6)
    assert sm.hop_latency(fit["alpha_s"], 4) == pytest.approx(fit["alpha_s"] / 6)


def test_relative_error_sign():
    assert sm.relative_error(110, 100) == pytest.approx(0.1)
    assert math.isclose(sm.relative_error(90, 100), -0.1)
