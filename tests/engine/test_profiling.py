"""--profile-steps: a real torch.profiler capture of training steps lands in run.json.

On the CPU the summary's units are operators with their self CPU time (no kernels exist); on a GPU
the same code reads kernels' device time (tests/engine/test_gpu.py). The summary's arithmetic (kernel
families, step markers) is checked in tests/unit/test_profile_summary.py.
"""
from __future__ import annotations

import gzip
import json


from hpc_imagenet.imagenet.train import profiling
from tests.helpers import explain, read_run, script
from tests.warm_start import warm_python


def test_profile_steps_writes_summary_and_trace(tmp_path):
    proc = warm_python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "32", "-b", "8", "--workers", "0",
                "--dummy", "--dummy-size", "160", "--epochs", "1", "--val-steps", "1", "--profile-steps", "3",
                "--log-dir", str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    prof = read_run(tmp_path)["profile"]
    assert prof["steps"] == 3 and prof["device"] == "cpu"
    assert prof["device_ms_per_step"] > 0
    # resnet18's step is dominated by convolutions, forward and backward
    assert next(iter(prof["families"])) == "convolution"
    shares = [k["share"] for k in prof["top_kernels"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0 + 1e-9
    assert any(k["name"] == "aten::convolution_backward" for k in prof["top_kernels"])
    trace = json.loads(gzip.open(tmp_path / prof["trace"]).read())
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])


def test_no_profile_by_default(dummy_run):
    """The engine tier's shared run, trained without --profile-steps."""
    assert "profile" not in read_run(dummy_run)
    assert not (dummy_run / profiling.TRACE_FILE).exists()
