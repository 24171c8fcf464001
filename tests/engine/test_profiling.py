"""--profile-steps: a real torch.profiler capture of training steps lands in run.json.

On the CPU the summary's units are operators with their self CPU time (no kernels exist); on a GPU
the same code reads kernels' device time (tests/engine/test_gpu.py). The family heuristic is checked on
kernel names of the kinds cuDNN, CUTLASS and torch's fused optimizers use.
"""
from __future__ import annotations

import gzip
import json

import pytest

from imagenet import profiling
from tests.helpers import explain, python, read_run, script


def test_profile_steps_writes_summary_and_trace(tmp_path):
    proc = python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "32", "-b", "8", "--workers", "0",
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


def test_no_profile_by_default(tmp_path):
    proc = python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "32", "-b", "8", "--workers", "0",
                "--dummy", "--dummy-size", "32", "--epochs", "1", "--val-steps", "1", "--log-dir", str(tmp_path))
    assert proc.returncode == 0, explain(proc)
    assert "profile" not in read_run(tmp_path)
    assert not (tmp_path / profiling.TRACE_FILE).exists()


@pytest.mark.parametrize("name,expected", [
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "convolution"),
    ("cudnn::bn_bw_1C11_kernel_new<__half, float, float2, 512, true, 1, true>", "batchnorm"),
    ("void at::native::(anonymous namespace)::batch_norm_collect_statistics_channels_last_kernel", "batchnorm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>", "elementwise / pointwise"),
    ("Memcpy HtoD (Pageable -> Device)", "copy / layout"),
    ("void at::native::(anonymous namespace)::max_pool_backward_nhwc", "reduction / pooling"),
])
def test_kernel_families(name, expected):
    assert profiling.family(name) == expected


def test_step_markers_are_taken_out_of_old_summaries():
    old = {"steps": 2, "device": "cuda", "device_ms_per_step": 100.0, "kernels_per_step": 11.0,
           "families": {"other": {"ms_per_step": 45.0, "share": 0.45}, "convolution": {"ms_per_step": 55.0, "share": 0.55}},
           "top_kernels": [{"name": "ProfilerStep*", "family": "other", "calls_per_step": 1.0, "ms_per_step": 40.0,
                            "share": 0.4},
                           {"name": "sm90_xmma_fprop", "family": "convolution", "calls_per_step": 10.0,
                            "ms_per_step": 55.0, "share": 0.55}]}
    fixed = profiling.without_step_markers(old)
    assert fixed["device_ms_per_step"] == 60.0 and fixed["kernels_per_step"] == 10.0
    assert fixed["families"]["other"]["ms_per_step"] == 5.0
    assert [k["name"] for k in fixed["top_kernels"]] == ["sm90_xmma_fprop"]
    assert abs(sum(f["share"] for f in fixed["families"].values()) - 1.0) < 1e-9
    assert profiling.without_step_markers(fixed) == fixed
