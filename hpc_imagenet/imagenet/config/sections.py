"""The settings of a run, in sections: each a small frozen dataclass whose fields carry their flags.

Flag names follow pytorch/examples imagenet/main.py (``-a -j -b --epochs --lr --wd -p --resume
-e --pretrained --seed --gpu --dummy --dist-url --dist-backend --world-size --rank
--multiprocessing-distributed``) and the seed tutorial's commands (``--b``, ``--desired-acc``,
``--opt-level``, ``--local_rank``). The command line stays flat: every field name is unique across
the sections, so a flag (or a recipe value) names its setting without naming the section. Adding a
setting is one field in one section below. Runtime facts (rank, device) are never stored here:
they live in :class:`hpc_imagenet.imagenet.process.group.DistInfo`; the batch a launch resolves lives in
:class:`hpc_imagenet.imagenet.config.batch.Batch`.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Optional, Tuple

from hpc_imagenet.imagenet import recipes
from hpc_imagenet.imagenet.config.choices import (AUTO_AUGMENT_POLICIES, COMPILE_MODES, DIST_BACKENDS, INTERPOLATIONS,
                                                  LR_SCHEDULE_ALIASES, LR_SCHEDULES, OPT_LEVELS, OPTIMIZERS, VARIANTS)
from hpc_imagenet.imagenet.config.batch import Batch

# Steps per epoch left out of the steady-state throughput (loader start, allocator, autotune); here, in
# a module without torch, so the report can name it without importing the engine.
WARMUP_STEPS = 5


def _opt(default: Any, *flags: str, help: str, **argparse_kwargs: Any):
    """A setting: its default, its flags (a bare name for the positional) and argparse's options."""
    return field(default=default, metadata={"flags": flags, "help": help, **argparse_kwargs})


@dataclass(frozen=True)
class DataSettings:
    """What to train on and how the images reach the model."""
    root: Optional[str] = _opt(None, "root", help="dataset root holding train/ and val/ ImageFolders, or a "
                               "shard folder written by python -m hpc_imagenet.imagenet.data.shards", nargs="?",
                               metavar="DIR")
    dummy: bool = _opt(False, "--dummy", help="synthetic tensors instead of images (compute-only benchmarks)",
                       action="store_true")
    image_size: int = _opt(224, "--image-size", "--train-crop-size", help="training crop size (validation "
                           "resizes to size*256/224 then centre-crops, unless --val-resize-size/--val-crop-size)",
                           type=int)
    train_crop_scale: Tuple[float, float] = _opt((0.08, 1.0), "--train-crop-scale", help="the training crop's "
                                                 "area as a fraction of the image's, drawn between MIN and MAX "
                                                 "(RandomResizedCrop's scale; 0.08 1 is ImageNet's; small images "
                                                 "such as 28-px photos want a milder MIN, e.g. 0.4)", type=float,
                                                 nargs=2, metavar=("MIN", "MAX"))
    train_crop_ratio: Tuple[float, float] = _opt((3 / 4, 4 / 3), "--train-crop-ratio", help="the training crop's "
                                                 "aspect ratio (width/height), drawn log-uniformly between MIN and "
                                                 "MAX (RandomResizedCrop's ratio; 0.75 1.333 is ImageNet's; 1 1 keeps "
                                                 "centred, upright items unstretched)", type=float, nargs=2,
                                                 metavar=("MIN", "MAX"))
    val_resize_size: Optional[int] = _opt(None, "--val-resize-size", help="validation: resize the short side to "
                                          "this (default: val crop size * 256 / 224)", type=int)
    val_crop_size: Optional[int] = _opt(None, "--val-crop-size", help="validation: centre crop size (default: "
                                        "--image-size)", type=int)
    min_res: Optional[int] = _opt(None, "--min-res", help="progressive resizing (FFCV): train at this size up to "
                                  "--start-ramp, then grow to --max-res by --end-ramp in multiples of 32; not with "
                                  "--data-backend dali", type=int)
    max_res: Optional[int] = _opt(None, "--max-res", help="progressive resizing: the final training size", type=int)
    start_ramp: int = _opt(0, "--start-ramp", help="progressive resizing: the last epoch at --min-res", type=int)
    end_ramp: int = _opt(0, "--end-ramp", help="progressive resizing: the first epoch at --max-res", type=int)
    mixup_alpha: float = _opt(0.0, "--mixup-alpha", help="Mixup's Beta parameter (0: off); with --cutmix-alpha "
                              "each batch gets one of the two", type=float)
    cutmix_alpha: float = _opt(0.0, "--cutmix-alpha", help="CutMix's Beta parameter (0: off)", type=float)
    auto_augment: Optional[str] = _opt(None, "--auto-augment", help="a per-image augmentation policy after the crop "
                                       "and flip, as torchvision's train.py names them: ta_wide (TrivialAugmentWide), "
                                       "ra (RandAugment), augmix (AugMix), imagenet, cifar10 or svhn (AutoAugment's "
                                       "policies); every backend, drawn from the sample's seed",
                                       choices=AUTO_AUGMENT_POLICIES)
    ra_magnitude: int = _opt(9, "--ra-magnitude", help="RandAugment's magnitude, of 31 bins (torchvision's scale; "
                             "timm's m of 10 is m x 3 here)", type=int)
    ra_magnitude_std: float = _opt(0.0, "--ra-magnitude-std", help="RandAugment: draw each image's magnitude from a "
                                   "normal distribution with this spread around --ra-magnitude (timm's mstd, x 3 "
                                   "on this scale; 0: fixed)", type=float)
    augmix_severity: int = _opt(3, "--augmix-severity", help="AugMix's severity (1-10)", type=int)
    random_erase: float = _opt(0.0, "--random-erase", help="probability of erasing a random rectangle of each "
                               "training image to the mean pixel (torchvision's RandomErasing after normalising)",
                               type=float)
    interpolation: str = _opt("bilinear", "--interpolation", help="resampling of the training crop, the validation "
                              "resize and the augmentation policy's geometric ops", choices=INTERPOLATIONS)
    val_interpolation: Optional[str] = _opt(None, "--val-interpolation", help="resampling of the validation resize "
                                            "alone (timm evaluates its ResNet strikes back weights bicubic; default: "
                                            "--interpolation)", choices=INTERPOLATIONS)
    ra_sampler: bool = _opt(False, "--ra-sampler", help="repeated augmentation: each image appears --ra-reps times "
                            "an epoch, on different ranks, each with its own augmentation (an epoch stays one "
                            "dataset's worth of steps)", action="store_true")
    ra_reps: int = _opt(3, "--ra-reps", help="repetitions of each image with --ra-sampler", type=int)
    workers: int = _opt(4, "-j", "--workers", help="data-loading worker processes per training process (per NODE "
                        "with --dist-url, divided among its processes, rounded up, as in pytorch/examples)",
                        type=int)
    data_backend: str = _opt("fast", "--data-backend", help="image decoding pipeline: fast (decodes only the "
                             "rows and scale the crop needs, uint8), baseline (pytorch/examples' float "
                             "pipeline), pil (PIL + v2 transforms, uint8), device (JPEG bytes through the loader, "
                             "decoded on the training device: nvJPEG on GPUs), dali (NVIDIA DALI decodes and "
                             "augments, on the GPU, "
                             "region-of-interest decoding; pip install nvidia-dali-cuda130); see "
                             "hpc_imagenet.imagenet.data.decode")
    skip_bad_images: bool = _opt(False, "--skip-bad-images", help="skip (and count) corrupt or unreadable "
                                 "images instead of stopping at the first one", action="store_true")
    stage_dir: Optional[str] = _opt(None, "--stage-dir", help="copy DATA to this node-local folder ($TMPDIR, "
                                     "/dev/shm, a local NVMe) once per node before training and read the copy; a "
                                     "complete earlier copy is reused. Each process expands $VARS itself, so "
                                     "'$TMPDIR' is every node's own folder; see hpc_imagenet.imagenet.data.staging",
                                     metavar="DIR")
    stage_verify: bool = _opt(False, "--stage-verify", help="with --stage-dir: also compare the copy's checksums "
                              "with the source's (reads both once more)", action="store_true")
    stage_cleanup: Optional[bool] = _opt(None, "--stage-cleanup", help="with --stage-dir: remove the node's copy "
                                         "when the run ends normally (a preempted or requeued run keeps it); "
                                         "default: on for a DIR under /dev/shm, off elsewhere",
                                         action=argparse.BooleanOptionalAction)
    steps_per_epoch: int = _opt(0, "--steps-per-epoch", help="stop each training epoch after this many steps "
                                "(0: the whole dataset); for benchmarks and smoke tests", type=int)
    val_steps: int = _opt(0, "--val-steps", help="validate on at most this many batches per rank (0: all)",
                          type=int)
    dummy_size: int = _opt(1_281_167, "--dummy-size", help="images per epoch with --dummy", type=int)
    num_classes: int = _opt(1000, "--num-classes", help="classes with --dummy (real data: from the folders)",
                            type=int)


@dataclass(frozen=True)
class ModelSettings:
    """Which network, and how it starts."""
    arch: str = _opt("resnet18", "-a", "--arch", "--model", help="torchvision model name (the list: "
                     "docs/configuration.md)",
                     metavar="ARCH")
    pretrained: bool = _opt(False, "--pretrained", help="start from torchvision's pretrained weights",
                            action="store_true")
    zero_init_residual: bool = _opt(False, "--zero-init-residual", help="zero the last BatchNorm weight of each "
                                    "residual block, so each block starts as the identity (Goyal et al. 2017)",
                                    action="store_true")
    weights: Optional[str] = _opt(None, "--weights", help="start from torchvision's weights by their enum name "
                                  "(e.g. ResNet50_Weights.IMAGENET1K_V2, or IMAGENET1K_V2 for -a's own)",
                                  metavar="WEIGHTS")
    drop_path_rate: float = _opt(0.0, "--drop-path-rate", "--drop-path", help="stochastic depth on residual "
                                 "networks: each block's residual branch is dropped per sample with a probability "
                                 "rising linearly over the blocks to this (timm's rule; 0: off)", type=float)
    model_ema: bool = _opt(False, "--model-ema", help="keep an exponential moving average of the weights, "
                           "checkpointed with the model", action="store_true")
    eval_weights: Optional[str] = _opt(None, "--eval-weights", choices=("model", "ema"), help="the weights the "
                                       "run is validated and scored on, the same at every evaluation (one "
                                       "evaluation each): model or ema (default: ema with --model-ema, else model)")
    model_ema_steps: int = _opt(32, "--model-ema-steps", help="update the average every N optimizer steps",
                                type=int)
    model_ema_decay: float = _opt(0.99998, "--model-ema-decay", help="the average's decay, adjusted to the global "
                                  "batch and epochs as torchvision's reference does", type=float)
    sync_bn: bool = _opt(False, "--sync-bn", help="synchronise BatchNorm statistics across DDP ranks",
                         action="store_true")


@dataclass(frozen=True)
class OptimSettings:
    """The optimiser, the learning-rate schedule and when training stops."""
    epochs: int = _opt(90, "--epochs", help="total epochs to run", type=int)
    start_epoch: int = _opt(0, "--start-epoch", help="epoch number to start at (useful on restarts)", type=int)
    batch_size: int = _opt(256, "-b", "--b", "--batch-size", help="batch size PER PROCESS (per NODE with "
                           "--dist-url, divided among its processes, as in pytorch/examples; the global "
                           "batch is printed at start)", type=int)
    lr: float = _opt(0.1, "--lr", "--learning-rate", help="base learning rate for a global batch of 256 "
                     "(scaled linearly, see --lr-scaling)", type=float)
    lr_scaling: str = _opt("linear", "--lr-scaling", help="linear: lr * global_batch / 256; none: use --lr "
                           "as given", choices=("linear", "none"))
    opt: str = _opt("sgd", "--opt", help="optimizer: sgd (momentum), sgd_nesterov, rmsprop and adamw (as "
                    "torchvision's train.py builds them), lars (MLPerf's; norm and bias parameters unadapted), lamb",
                    choices=OPTIMIZERS)
    lars_coefficient: float = _opt(0.001, "--lars-coefficient", help="LARS trust coefficient (eeta)", type=float)
    accum_steps: int = _opt(1, "--accum-steps", help="micro-batches per optimizer step: the global batch is "
                            "-b x processes x this; see docs/recipes.md for what differs with BatchNorm", type=int)
    lr_schedule: str = _opt("step", "--lr-schedule", "--lr-scheduler", help="per step: step (x --lr-gamma at "
                            "--lr-steps), cosine (down to --lr-min), poly (MLPerf: --lr-power, --lr-end), ramp "
                            "(FFCV: linear up to --lr-peak-epoch, then down to 0) or exponential (x --lr-gamma each "
                            "epoch); torchvision's steplr, cosineannealinglr and exponentiallr name the same",
                            choices=LR_SCHEDULES + tuple(LR_SCHEDULE_ALIASES))
    lr_step_size: Optional[int] = _opt(None, "--lr-step-size", help="the step schedule every N epochs (torchvision's "
                                       "StepLR): sets --lr-steps to N, 2N, ... below --epochs", type=int)
    lr_gamma: float = _opt(0.1, "--lr-gamma", help="the step and exponential schedules' factor", type=float)
    lr_min: float = _opt(0.0, "--lr-min", "--min-lr", help="the cosine schedule's floor, an absolute LR "
                         "(torchvision's eta_min, timm's --min-lr)", type=float)
    warmup_lr: Optional[float] = _opt(None, "--warmup-lr", help="the absolute LR the linear warm-up starts from, "
                                      "going linearly to the peak (timm's; default: (step+1)/warm-up steps of the "
                                      "peak, see --lr-warmup-decay)", type=float)
    lr_per_epoch: bool = _opt(False, "--lr-per-epoch", help="hold the LR for a whole epoch at the schedule's value "
                              "at its start, as timm's and torchvision's schedulers step (default: per step)",
                              action="store_true")
    cosine_from_start: bool = _opt(False, "--cosine-from-start", help="the cosine runs over all --epochs from epoch "
                                   "0 and the warm-up replaces its first epochs (timm's CosineLRScheduler without "
                                   "--warmup-prefix); default: the cosine starts where the warm-up ends",
                                   action="store_true")
    lr_warmup_method: str = _opt("linear", "--lr-warmup-method", help="warm-up: linear (from --lr-warmup-decay x "
                                 "the peak up to it) or constant (--lr-warmup-decay x the peak throughout)",
                                 choices=("linear", "constant"))
    lr_warmup_decay: Optional[float] = _opt(None, "--lr-warmup-decay", help="the warm-up's start factor of the "
                                            "peak LR (default: (step+1)/warm-up steps)", type=float)
    lr_warmup_from_base: bool = _opt(False, "--lr-warmup-from-base", help="start the warm-up at --lr (the LR "
                                     "for a global batch of 256) and rise linearly to the scaled LR: Goyal et al.'s "
                                     "gradual warm-up (default: from 0, or --lr-warmup-decay x the peak)",
                                     action="store_true")
    lr_power: float = _opt(2.0, "--lr-power", help="poly schedule's power", type=float)
    lr_end: float = _opt(0.0, "--lr-end", help="poly schedule's end LR", type=float)
    lr_peak_epoch: float = _opt(2.0, "--lr-peak-epoch", help="ramp schedule's peak epoch", type=float)
    lr_steps: Tuple[int, ...] = _opt((30, 60), "--lr-steps", help="epochs where the step schedule divides lr by 10 "
                                     "(main.py's StepLR every 30 epochs: 30 and 60 of 90)", type=int, nargs="+")
    warmup_epochs: Optional[float] = _opt(None, "--warmup-epochs", "--lr-warmup-epochs", help="linear warm-up "
                                          "length (default: 5 when the scaled lr exceeds the base lr, else 0)",
                                          type=float)
    momentum: float = _opt(0.9, "--momentum", help="SGD momentum", type=float)
    optimizer_impl: str = _opt("auto", "--optimizer-impl", help="SGD kernels: fused (one kernel for all "
                               "parameters), foreach (batched), default (torch's choice); auto: fused where "
                               "the device supports it, else torch's choice",
                               choices=("auto", "fused", "foreach", "default"))
    weight_decay: float = _opt(1e-4, "--wd", "--weight-decay", help="weight decay", type=float)
    bias_weight_decay: Optional[float] = _opt(None, "--bias-weight-decay", help="weight decay of biases (default: "
                                              "0 with --no-bn-wd, else --wd)", type=float)
    lamb_max_grad_norm: Optional[float] = _opt(None, "--lamb-max-grad-norm", help="with --opt lamb: divide every "
                                               "gradient by max(1, global norm / this) inside the step, as timm's "
                                               "Lamb does with its max_grad_norm (1.0 by default there; default "
                                               "here: no clipping)", type=float)
    clip_grad_norm: Optional[float] = _opt(None, "--clip-grad-norm", help="clip the gradients' global L2 norm to "
                                           "this before each step (after unscaling; default: no clipping)",
                                           type=float)
    bce_loss: bool = _opt(False, "--bce-loss", help="binary cross-entropy on one-hot (or mixed) targets instead of "
                          "softmax cross-entropy, as timm's ResNet strikes back recipes", action="store_true")
    bce_target_thresh: Optional[float] = _opt(None, "--bce-target-thresh", help="with --bce-loss: targets above "
                                              "this become 1, the rest 0 (timm's; default: keep the soft targets)",
                                              type=float)
    no_bn_wd: bool = _opt(False, "--no-bn-wd", help="no weight decay on BatchNorm and bias parameters (always "
                          "so with --opt lars or lamb, which skip them as MLPerf's LARS)", action="store_true")
    norm_weight_decay: Optional[float] = _opt(None, "--norm-weight-decay", help="weight decay of normalisation "
                                              "layers (default: 0 with --no-bn-wd, else --wd; SGD only)", type=float)
    label_smoothing: float = _opt(0.0, "--label-smoothing", help="label smoothing: the targets "
                                  "become (1 - e) x target + e / classes; with Mixup/CutMix the mixed targets, before "
                                  "--bce-target-thresh (timm's)", type=float)
    desired_acc: Optional[float] = _opt(None, "--desired-acc", help="stop once validation top-1 reaches this "
                                        "(0.75 or 75 both mean 75%%)", type=float)
    eval_every: int = _opt(1, "--eval-every", help="validate every N epochs and after the last one (MLPerf "
                           "evaluates every 4); --desired-acc is checked at each validation", type=int, metavar="N")
    eval_offset: int = _opt(0, "--eval-offset", help="validate first after K epochs, then every --eval-every N "
                            "(MLPerf's reference: N 4, K 2); 0: first after N", type=int, metavar="K")
    time_budget_minutes: Optional[float] = _opt(None, "--time-budget-minutes", help="stop at the first epoch "
                                                "end after this many minutes of training and validation "
                                                "(validating there), e.g. to compare runs in equal time; "
                                                "with --desired-acc the run goes on past the target to the budget",
                                                type=float, metavar="M")

    def validation_due(self, epochs_done: int) -> bool:
        """Whether the run validates once EPOCHS_DONE epochs are trained: every --eval-every epochs from
        the first (--eval-offset, else --eval-every), and after the last."""
        first = self.eval_offset or self.eval_every
        return epochs_done == self.epochs or (epochs_done >= first and (epochs_done - first) % self.eval_every == 0)


@dataclass(frozen=True)
class PrecisionSettings:
    """Mixed precision (imagenet_ddp_apex.py's flags; every variant accepts them)."""
    opt_level: Optional[str] = _opt(None, "--opt-level", help="O0 fp32, O1 autocast, O2 half model + fp32 "
                                    "master weights, O3 pure half (default O0; O1 for the amp variant)",
                                    choices=OPT_LEVELS)
    keep_batchnorm_fp32: Optional[str] = _opt(None, "--keep-batchnorm-fp32", help="True/False: keep "
                                              "BatchNorm in fp32 (default: per opt level, as Apex)")
    loss_scale: str = _opt("dynamic", "--loss-scale", help="'dynamic' or a fixed float loss scale")
    amp_backend: str = _opt("auto", "--amp-backend", help="auto: NVIDIA Apex if apex.amp imports "
                            "(not with --accum-steps), else native torch.amp", choices=("auto", "native", "apex"))
    amp_dtype: Optional[str] = _opt(None, "--amp-dtype", help="half type (default float16 on CUDA, "
                                    "bfloat16 on CPU)", choices=("float16", "bfloat16"))

    @property
    def precision_level(self) -> str:
        """The opt level in force (the parser fills in the variant's default)."""
        return self.opt_level or "O0"


@dataclass(frozen=True)
class PerfSettings:
    """Speed knobs that do not change what is computed (up to rounding)."""
    channels_last: Optional[bool] = _opt(None, "--channels-last", help="NHWC memory format (default: on for "
                                         "CUDA, where tensor-core convs want it; off on CPU, where it is slower)",
                                         action=argparse.BooleanOptionalAction)
    compile: bool = _opt(False, "--compile", help="torch.compile the model", action="store_true")
    compile_mode: str = _opt("default", "--compile-mode", help="torch.compile mode; any but 'default' implies "
                             "--compile. reduce-overhead adds CUDA graphs (fewer kernel launches per step); "
                             "max-autotune also benchmarks kernel choices (minutes of compiling)",
                             choices=COMPILE_MODES)
    deterministic: bool = _opt(False, "--deterministic", "--use-deterministic-algorithms",
                               help="deterministic kernels (slower)",
                               action="store_true")
    cuda_graph: bool = _opt(False, "--cuda-graph", help="replay the whole training step (forward, backward, "
                            "optimizer) as one CUDA graph captured after a few eager steps, without compiling; "
                            "where the run does not allow it, it stays eager and says why in one line",
                            action="store_true")

    def use_channels_last(self, device_type: str) -> bool:
        return self.channels_last if self.channels_last is not None else device_type == "cuda"

    @property
    def use_compile(self) -> bool:
        return self.compile or self.compile_mode != "default"


@dataclass(frozen=True)
class DistSettings:
    """How the processes find each other and all-reduce."""
    world_size: int = _opt(-1, "--world-size", help="with --dist-url: number of NODES (pytorch/examples "
                           "semantics)", type=int)
    rank: int = _opt(-1, "--rank", help="with --dist-url: this node's rank", type=int)
    dist_url: Optional[str] = _opt(None, "--dist-url", help="tcp://MASTER_IP:PORT for node-level launch "
                                   "(one process per local GPU is spawned)")
    dist_backend: Optional[str] = _opt(None, "--dist-backend", help="nccl, gloo or mpi (default: nccl on "
                                       "GPUs, gloo on CPU)", choices=DIST_BACKENDS)
    multiprocessing_distributed: bool = _opt(False, "--multiprocessing-distributed", help="spawn one "
                                             "process per local GPU (implied by --dist-url)",
                                             action="store_true")
    procs_per_node: Optional[int] = _opt(None, "--procs-per-node", help="processes to spawn per node with "
                                         "--dist-url (default: the GPU count, 1 on CPU)", type=int)
    local_rank: Optional[int] = _opt(None, "--local-rank", "--local_rank", help="set by "
                                     "torch.distributed.launch (LOCAL_RANK is read too)", type=int)
    gpu: Optional[int] = _opt(None, "--gpu", help="GPU id to use (single-process variants)", type=int)
    no_accel: bool = _opt(False, "--no-accel", help="train on the CPU even where a GPU is visible (pytorch/examples' "
                          "'disables accelerator'); the --dist-url launch then starts one process per node",
                          action="store_true")
    ddp_bucket_cap_mb: Optional[float] = _opt(None, "--ddp-bucket-cap-mb", help="DDP gradient bucket size in "
                                              "MB (default: torch's 25); fewer, larger all-reduces vs earlier "
                                              "overlap with backward", type=float)
    ddp_static_graph: bool = _opt(False, "--ddp-static-graph", help="tell DDP the autograd graph is the same "
                                  "every step (enables its static-graph optimisations)", action="store_true")
    ddp_comm_hook: str = _opt("none", "--ddp-comm-hook", help="compress gradients to bf16 or fp16 for the "
                              "all-reduce (half the bytes, for slow networks); none: full precision",
                              choices=("none", "bf16", "fp16"))
    dist_timeout: float = _opt(1800.0, "--dist-timeout", help="seconds to wait for the other ranks during "
                               "set-up (rendezvous, the --stage-dir copy, the dataset scan) before failing",
                               type=float)
    collective_timeout: float = _opt(300.0, "--collective-timeout", help="seconds a training collective may "
                                     "make no progress (a rank stopped, hung or unreachable) before the job "
                                     "ends naming the ranks that did not arrive", type=float)


@dataclass(frozen=True)
class CheckpointSettings:
    """When checkpoints are written, how many are kept, where a run resumes from."""
    checkpoint_every_steps: int = _opt(0, "--checkpoint-every-steps", help="also checkpoint every N training "
                                       "steps, mid-epoch (0: only at epoch ends and stop signals); the write "
                                       "runs in the background, see hpc_imagenet.imagenet.train.checkpoint_writer",
                                       type=int, metavar="N")
    checkpoint_every_minutes: float = _opt(30.0, "--checkpoint-every-minutes", help="also checkpoint every M "
                                           "minutes of training, at the first print boundary after M minutes "
                                           "(every rank agrees there), so a crash loses at most M minutes; "
                                           "0: off", type=float, metavar="M")
    keep_checkpoints: int = _opt(2, "--keep-checkpoints", help="keep the last K checkpoints as "
                                 "checkpoint-eEPOCH-SAMPLE.pth.tar next to checkpoint.pth.tar (the newest) and "
                                 "model_best.pth.tar (0: only those two)", type=int, metavar="K")
    resume: str = _opt("", "--resume", help="checkpoint to resume from, or 'auto' for the run folder's "
                       "latest", metavar="PATH")


@dataclass(frozen=True)
class LoggingSettings:
    """What a run prints and records, and where."""
    print_freq: int = _opt(10, "-p", "--print-freq", help="print and log every N steps", type=int)
    profile_steps: int = _opt(0, "--profile-steps", help="record N training steps after the warm-up with "
                              "torch.profiler: device time per kernel into run.json (profile), a Chrome trace "
                              "into the run folder; profiled steps run slower, so not for benchmarks", type=int)
    step_times: bool = _opt(False, "--step-times", help="keep each steady-state step's wall time in run.json "
                            "(CUDA events on GPUs, read at print boundaries: no extra host sync); the scaling "
                            "model's straggler term needs their distribution", action="store_true")
    straggler_threshold: float = _opt(0.2, "--straggler-threshold", help="at print boundaries, log the "
                                      "slowest rank and its host when its step or data-wait time exceeds the "
                                      "median by this fraction of a step (0.2: 20%%); 0: never",
                                      type=float)
    log_dir: Optional[str] = _opt(None, "--log-dir", "--output-dir", help="run folder for TensorBoard, checkpoints and "
                                  "run.json (default runs/<date>_<host>_<arch>_gpux<world>_b<batch>_<prec>)")


@dataclass(frozen=True)
class RunSettings:
    """What kind of run this is: the variant, the recipe, the seed, training or evaluation only."""
    recipe: str = _opt("examples", "--recipe", help=f"a named, cited preset of settings: {', '.join(recipes.names())} "
                       "(flags given here win; sources and values: docs/recipes.md)", metavar="NAME")
    config: Optional[str] = _opt(None, "--config", help="a TOML file of settings in the recipes' format ([values] "
                                 "setting = value; hpc_imagenet/imagenet/recipes/README.md), applied over --recipe "
                                 "and under the "
                                 "flags given here", metavar="FILE")
    seed: Optional[int] = _opt(None, "--seed", help="seed everything; with --deterministic, bit-exact "
                               "reruns and resumes", type=int)
    evaluate: bool = _opt(False, "-e", "--evaluate", "--test-only", help="validate only", action="store_true")
    variant: str = _opt("ddp", "--variant", help="nd | dp | ddp | amp (set by the entry scripts)",
                        choices=VARIANTS)

    @property
    def distributed(self) -> bool:
        return self.variant in ("ddp", "amp")


# The sections in the order the settings document lists them: attribute name -> class.
SECTIONS: Dict[str, type] = {
    "run": RunSettings, "data": DataSettings, "model": ModelSettings, "optim": OptimSettings,
    "precision": PrecisionSettings, "perf": PerfSettings, "dist": DistSettings,
    "checkpoint": CheckpointSettings, "logging": LoggingSettings,
}


@dataclass(frozen=True)
class Settings:
    """All settings of a run, by section, and the batch the launch resolved (see hpc_imagenet.imagenet.config.batch)."""
    run: RunSettings = field(default_factory=RunSettings)
    data: DataSettings = field(default_factory=DataSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    precision: PrecisionSettings = field(default_factory=PrecisionSettings)
    perf: PerfSettings = field(default_factory=PerfSettings)
    dist: DistSettings = field(default_factory=DistSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    batch: Batch = field(default_factory=Batch)

    @property
    def distributed(self) -> bool:
        return self.run.distributed

    def to_dict(self) -> dict:
        """The settings document (``--print-config``, run.json's ``config``): one object per section."""
        return {name: _section_dict(getattr(self, name)) for name in (*SECTIONS, "batch")}

    def flat(self) -> dict:
        """Every setting by its own name, and the batch as batch_*: one level, for TensorBoard's hparams."""
        out = {key: value for name in SECTIONS for key, value in _section_dict(getattr(self, name)).items()}
        return {**out, **{f"batch_{key}": value for key, value in _section_dict(self.batch).items()}}


def _section_dict(section: Any) -> dict:
    return {f.name: (list(v) if isinstance(v := getattr(section, f.name), tuple) else v)
            for f in dataclasses.fields(section)}


def setting_fields() -> Iterator[Tuple[str, dataclasses.Field]]:
    """(section name, field) for every setting, in command-line order."""
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            yield section, f


def section_of() -> Dict[str, str]:
    """Setting name -> the section that holds it (names are unique across sections)."""
    return {f.name: section for section, f in setting_fields()}
