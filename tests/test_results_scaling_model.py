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
    p = sm.predict(M, 1, overlap=False)
    assert p["comm_time_s"] == 0 and p["efficiency"] == 1 and p["images_per_s"] == pytest.approx(320)


def test_two_gpus_inside_a_node_by_hand():
    # comm = 2*(2-1)/2 * 1e8 / 1e10 = 0.01 s; no overlap: 0.11 s per step
    p = sm.predict(M, 2, overlap=False)
    assert p["comm_time_s"] == pytest.approx(0.01)
    assert p["images_per_s"] == pytest.approx(2 * 32 / 0.11)
    assert p["efficiency"] == pytest.approx(0.1 / 0.11)
    # overlap: 0.1/3 + max(0.2/3, 0.01) = 0.1 -> fully hidden
    assert sm.predict(M, 2, overlap=True)["efficiency"] == pytest.approx(1.0)


def test_four_gpus_cross_the_slow_link_by_hand():
    # comm = 2*3/4 * 1e8 / 1e9 = 0.15 s; no overlap 0.25 s; overlap 0.1/3 + 0.15 s
    assert sm.comm_time(M, 4) == pytest.approx(0.15)
    assert sm.step_time(M, 4, overlap=False) == pytest.approx(0.25)
    assert sm.step_time(M, 4, overlap=True) == pytest.approx(0.1 / 3 + 0.15)
    assert sm.predict(M, 4, overlap=False)["images_per_s"] == pytest.approx(4 * 32 / 0.25)


def test_latency_term_counts_buckets_and_hops():
    m = sm.ModelInputs(step_time_s=1, batch_per_gpu=1, grad_bytes=50e6, busbw_intra=1e12, alpha_intra_s=1e-5,
                       bucket_bytes=20e6)
    # 3 buckets * 2*(8-1) hops * 10 us + 2*7/8 * 5e7 / 1e12
    assert sm.comm_time(m, 8) == pytest.approx(3 * 14 * 1e-5 + 1.75 * 5e7 / 1e12)


def test_calibrate_recovers_the_compute_time():
    measured = sm.step_time(M, 4, overlap=False)
    got = sm.calibrate(sm.ModelInputs(**{**M.__dict__, "step_time_s": 1.0}), 4, measured, overlap=False)
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
