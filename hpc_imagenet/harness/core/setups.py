"""Training-step configurations shared by the runners and the reports: the named ``--setups``, the
point parameters that must match for two points to be compared (the variants' entry scripts live in
hpc_imagenet.imagenet.common.variants), and the size of ImageNet that projections to its scale use."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

IMAGENET_TRAIN_IMAGES = 1_281_167  # ILSVRC-2012's training images: one epoch at ImageNet scale
IMAGENET_VAL_IMAGES = 50_000  # its validation images: one evaluation pass

# Parameters that must match for two points to be compared in a scaling efficiency.
GROUP_KEYS = ("variant", "batch_size", "precision", "amp_dtype", "data", "arch", "image_size", "workers",
              "setup")
BASELINE_SETUP = "baseline"
LOG_QUIET_SETUP = "engine-log-epoch"
LOG_EVERY_STEP_SETUP = "engine-log-step"
CKPT_OFF_SETUP, CKPT_ON_SETUP, CKPT_EVERY_STEPS = "engine-ckpt-epoch", "engine-ckpt-steps", 20


@dataclass(frozen=True)
class Setup:
    """A named training-step configuration, compared at the same batch, data and process count."""

    variant: str
    precision: str
    amp_dtype: Optional[str]
    flags: Tuple[str, ...]
    about: str


# --setups: the pytorch/examples-style loop against the engine's defaults, same batch and data.
SETUPS: Dict[str, Setup] = {
    BASELINE_SETUP: Setup("ddp", "O0", None, ("--data-backend", "baseline", "--optimizer-impl", "default",
                                              "--no-channels-last"),
                          "pytorch/examples: PIL + ToTensor/Normalize float pipeline, for-loop SGD, NCHW, fp32"),
    "engine": Setup("ddp", "O0", None, (), "engine defaults (fast JPEG backend, optimizer auto, "
                                           "channels-last where it helps), fp32"),
    "engine-bf16": Setup("amp", "O1", "bfloat16", (), "imagenet_ddp_apex.py --opt-level O1 --amp-dtype bfloat16, "
                                                      "engine defaults otherwise"),
    "engine-channels-last": Setup("ddp", "O0", None, ("--channels-last",), "engine defaults with channels-last "
                                                                           "(on a CPU too), fp32"),
    "engine-bf16-channels-last": Setup("amp", "O1", "bfloat16", ("--channels-last",), "engine-bf16 with "
                                                                                      "channels-last (on a CPU too)"),
    # The yardstick: the same step as a bare PyTorch loop (hpc_imagenet/harness/runners/bare_loop.py), synthetic data
    # only
    "bare": Setup("bare", "O0", None, (), "a bare PyTorch loop: model, cross-entropy, SGD on synthetic tensors, fp32"),
    # PyTorch Lightning's Trainer on the same model, data folder and batch (hpc_imagenet/harness/runners/
    # lightning_loop.py): the engine's loaders through ImageNetDataModule; a data folder only
    "lightning": Setup("lightning", "O0", None, (), "PyTorch Lightning's Trainer on the engine's loaders "
                                                    "(ImageNetDataModule): the same model, SGD, batch, fp32"),
    "bare-channels-last": Setup("bare", "O0", None, ("--channels-last",), "the bare loop, channels-last, fp32"),
    "bare-bf16": Setup("bare", "O1", "bfloat16", (), "the bare loop under bf16 autocast"),
    "bare-bf16-channels-last": Setup("bare", "O1", "bfloat16", ("--channels-last",),
                                     "the bare loop under bf16 autocast, channels-last"),
    "engine-fp16": Setup("amp", "O1", "float16", (), "imagenet_ddp_apex.py --opt-level O1 --amp-dtype float16 "
                                                     "(dynamic loss scaling), engine defaults otherwise"),
    "engine-fp16-compile": Setup("amp", "O1", "float16", ("--compile",), "engine-fp16 with --compile "
                                                                          "(torch.compile, default mode)"),
    "engine-fp16-device-decode": Setup("amp", "O1", "float16", ("--data-backend", "device"),
                                       "engine-fp16 with JPEGs decoded on the GPU (nvJPEG), not in the loader"),
    "engine-fp16-dali": Setup("amp", "O1", "float16", ("--data-backend", "dali"),
                              "engine-fp16 with NVIDIA DALI decoding and augmenting on the GPU (nvJPEG "
                              "region-of-interest decode)"),
    # The large-batch recipes' per-step costs beside engine-fp16: LARS's norms of every layer, the EMA update.
    "engine-fp16-lars": Setup("amp", "O1", "float16", ("--opt", "lars"), "engine-fp16 with MLPerf's LARS (two "
                                                                          "norms and a trust ratio per layer)"),
    "engine-fp16-lamb": Setup("amp", "O1", "float16", ("--opt", "lamb"), "engine-fp16 with LAMB (Adam's step, a "
                                                                          "trust ratio per layer)"),
    "engine-fp16-ema": Setup("amp", "O1", "float16", ("--model-ema",), "engine-fp16 with an EMA of the weights "
                                                                       "(torch.optim.swa_utils, every few steps)"),
    "engine-bf16-compile": Setup("amp", "O1", "bfloat16", ("--compile",), "engine-bf16 with --compile"),
    "engine-fp16-cudagraphs": Setup("amp", "O1", "float16", ("--compile-mode", "reduce-overhead"),
                                    "engine-fp16 with torch.compile mode reduce-overhead (CUDA graphs)"),
    # The whole step replayed as one CUDA graph, no compiler (--cuda-graph): bf16, and fp16 at a static loss scale
    # (a dynamic one skips steps by a host decision, which a graph cannot hold)
    "engine-bf16-graph": Setup("amp", "O1", "bfloat16", ("--cuda-graph",), "engine-bf16 with the whole step in one "
                                                                           "CUDA graph (--cuda-graph)"),
    "engine-fp16-graph": Setup("amp", "O1", "float16", ("--cuda-graph", "--loss-scale", "1024"),
                               "engine-fp16 at a static loss scale of 1024, the whole step in one CUDA graph"),
    "engine-fp16-max-autotune": Setup("amp", "O1", "float16", ("--compile-mode", "max-autotune"),
                                      "engine-fp16 with torch.compile mode max-autotune (benchmarked kernel "
                                      "choices, CUDA graphs)"),
    # The pair behind the logging-overhead ratio: the same run logging at every step vs only per epoch.
    LOG_QUIET_SETUP: Setup("ddp", "O0", None, ("-p", "1000000"), "engine defaults, logging only at epoch end"),
    LOG_EVERY_STEP_SETUP: Setup("ddp", "O0", None, ("-p", "1"), "engine defaults, printing and TensorBoard "
                                                               "step scalars at every step (a device sync each)"),
    # The pair behind the checkpoint overhead: mid-epoch checkpoints often enough that their cost shows
    # in a short run, against checkpoints at the epoch end only (outside the measured steps in both).
    CKPT_OFF_SETUP: Setup("ddp", "O0", None, ("--checkpoint-every-steps", "0", "--checkpoint-every-minutes", "0"),
                          "engine defaults, checkpoints only at the epoch end"),
    CKPT_ON_SETUP: Setup("ddp", "O0", None, ("--checkpoint-every-steps", str(CKPT_EVERY_STEPS),
                                             "--checkpoint-every-minutes", "0"),
                         f"engine defaults, a background checkpoint every {CKPT_EVERY_STEPS} steps"),
}


# What make bench compares on a CPU: fp16 there is emulated (tens of times slower) and compiling takes
# about a minute, so the fp16 and compile setups are for GPU machines (results/gpu_session.sh).
CPU_SETUPS = ("baseline", "engine", "engine-bf16", LOG_QUIET_SETUP, LOG_EVERY_STEP_SETUP)


def group_key(point: object) -> Tuple:
    """Points (a train point object) with the same key (and sweep) form one scaling series."""
    return tuple(str(getattr(point, k, None)) for k in GROUP_KEYS)
