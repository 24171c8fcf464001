"""The engine's per-step times (--step-times), which the scaling model calibrates against: a real
tiny training run records each steady step (CPU here; CUDA events on a GPU)."""
import pytest
import torch

from tests.helpers import DUMMY_STEP_TIMES, explain, python, read_run, script


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")])])
def test_engine_records_each_steady_step_time(device, request, tmp_path):
    """CPU: host clock per step (the engine tier's shared dummy_run); GPU: CUDA events read at print
    boundaries."""
    # 12 steps an epoch, 3 of them warm-up (a quarter), 2 epochs: 18 steady steps
    run_dir = tmp_path
    if device == "cpu":
        run_dir = request.getfixturevalue("dummy_run")
    else:
        proc = python(script("imagenet_nd.py"), *DUMMY_STEP_TIMES, "--gpu", "0", "--log-dir", tmp_path)
        assert proc.returncode == 0, explain(proc)
    tp = read_run(run_dir)["throughput"]
    assert len(tp["step_times_ms"]) == tp["measured_steps"] == 18
    assert all(t > 0 for t in tp["step_times_ms"])
    # the same wall time as the steady-state meter, step by step
    assert sum(tp["step_times_ms"]) == pytest.approx(tp["step_time_ms"] * tp["measured_steps"], rel=0.25)
    # where each steady step went, kept for every run: medians of the loader wait, the host's loop, and on a GPU
    # the step's span on the device's stream
    breakdown = tp["breakdown"]
    assert breakdown["steps"] == 18 and breakdown["data_wait_ms"] >= 0 and breakdown["host_ms"] > 0
    assert (breakdown["device_ms"] is None) == (device == "cpu")
    # waiting and the host's loop make up a step: their medians stay within the steps' range
    assert breakdown["data_wait_ms"] + breakdown["host_ms"] <= max(tp["step_times_ms"]) * 1.05
    if device == "cuda":
        assert 0 < breakdown["device_ms"] <= max(tp["step_times_ms"]) * 1.05
