"""--cuda-graph's checks: each part of a run that a captured step cannot hold is named in one line, and the
run stays eager (the capture itself needs a GPU: tests/engine/test_cuda_graph.py)."""
import pytest
import torch

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.train import cuda_graph

CUDA = torch.device("cuda")


def _why(*flags, world_size=1, device=CUDA, scale=1.0, fused=True):
    cfg = config.parse(["--dummy", "--cuda-graph", *flags])
    return cuda_graph.why_not(cfg, device, world_size, cfg.optim.opt, scale, fused)


def test_a_plain_single_gpu_run_is_captured():
    assert _why() is None
    assert _why("--opt-level", "O1", "--amp-dtype", "bfloat16", "--model-ema") is None  # the EMA stays eager
    assert _why("--opt-level", "O1", "--amp-dtype", "float16", "--loss-scale", "128", scale=128.0) is None


@pytest.mark.parametrize("flags, kw, says", [
    ((), {"device": torch.device("cpu")}, "it needs a CUDA GPU"),
    ((), {"world_size": 2}, "one process only"),
    (("--compile",), {}, "--compile makes graphs of its own"),
    (("--accum-steps", "2"), {}, "gradient accumulation"),
    (("--min-res", "160", "--max-res", "192", "--end-ramp", "2", "--epochs", "3"), {}, "progressive resizing"),
    (("--mixup-alpha", "0.2"), {}, "mixup and cutmix"),
    (("--opt-level", "O2"), {}, "O2/O3"),
    (("--opt-level", "O1", "--amp-dtype", "float16"), {"scale": "dynamic"}, "dynamic loss scale"),
    (("--opt", "lamb"), {}, "the lamb optimizer is not known to be capturable"),
    (("--optimizer-impl", "foreach"), {"fused": False}, "use --optimizer-impl fused"),
])
def test_what_a_graph_cannot_hold_is_named(flags, kw, says):
    why = _why(*flags, **kw)
    assert why is not None and says in why
    line = cuda_graph.fallback_line(why)
    assert line.startswith("--cuda-graph: ") and line.endswith("running the step eagerly") and "\n" not in line
