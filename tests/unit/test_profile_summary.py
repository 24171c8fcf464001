"""The profile summary's arithmetic: kernel names of the kinds cuDNN, CUTLASS and torch's fused
optimizers use fall in the right family, and old summaries lose their step markers (the real
--profile-steps capture is in tests/engine/test_profiling.py)."""
from __future__ import annotations

import pytest

from hpc_imagenet.imagenet.train import profiling


@pytest.mark.parametrize("name,expected", [
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "convolution"),
    ("cudnn::bn_bw_1C11_kernel_new<__half, float, float2, 512, true, 1, true>", "batchnorm"),
    ("void at::native::(anonymous namespace)::batch_norm_collect_statistics_channels_last_kernel", "batchnorm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>",
     "elementwise / pointwise"),
    ("Memcpy HtoD (Pageable -> Device)", "copy / layout"),
    ("void at::native::(anonymous namespace)::max_pool_backward_nhwc", "reduction / pooling"),
])
def test_kernel_families(name, expected):
    assert profiling.family(name) == expected


def test_step_markers_are_taken_out_of_old_summaries():
    old = {"steps": 2, "device": "cuda", "device_ms_per_step": 100.0, "kernels_per_step": 11.0,
           "families": {"other": {"ms_per_step": 45.0, "share": 0.45},
                        "convolution": {"ms_per_step": 55.0, "share": 0.55}},
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
