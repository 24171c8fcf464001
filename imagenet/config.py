"""One frozen training configuration, and the command line built from it.

Flag names follow pytorch/examples imagenet/main.py (``-a -j -b --epochs --lr --wd -p --resume
-e --pretrained --seed --gpu --dummy --dist-url --dist-backend --world-size --rank
--multiprocessing-distributed``) and the seed tutorial's commands (``--b``, ``--desired-acc``,
``--opt-level``, ``--local_rank``). Each field of :class:`TrainConfig` carries its flags and help
text, so the parser and the config cannot drift apart. Runtime facts (rank, device) are never
stored here: they live in :class:`imagenet.distributed.DistInfo`.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

VARIANTS = ("nd", "dp", "ddp", "amp")
OPT_LEVELS = ("O0", "O1", "O2", "O3")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class ConfigError(ValueError):
    """A flag value that cannot work; the message says what to change."""


def _flag(*flags: str, help: str, **argparse_kwargs: Any) -> dict:
    return {"flags": flags, "help": help, **argparse_kwargs}


def _opt(default: Any, *flags: str, help: str, **kw: Any):
    return field(default=default, metadata=_flag(*flags, help=help, **kw))


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs to know before it starts; see each field's help."""

    # --- what to train on
    data: Optional[str] = _opt(None, "data", help="dataset root holding train/ and val/ ImageFolders, or a "
                               "shard folder written by python -m imagenet.shards",
                               nargs="?", metavar="DIR")
    dummy: bool = _opt(False, "--dummy", help="synthetic tensors instead of images (compute-only benchmarks)",
                       action="store_true")
    image_size: int = _opt(224, "--image-size", "--train-crop-size", help="training crop size (validation "
                           "resizes to size*256/224 then centre-crops, unless --val-resize-size/--val-crop-size)",
                           type=int)
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
    workers: int = _opt(4, "-j", "--workers", help="data-loading worker processes per training process (per NODE "
                        "with --dist-url, divided among its processes, rounded up, as in pytorch/examples)",
                        type=int)
    data_backend: str = _opt("fast", "--data-backend", help="image decoding pipeline: fast (decodes only the "
                             "rows and scale the crop needs, uint8), baseline (pytorch/examples' float "
                             "pipeline), pil (PIL + v2 transforms, uint8), device (JPEG bytes through the loader, "
                             "decoded on the training device: nvJPEG on GPUs), dali (NVIDIA DALI decodes and "
                             "augments, on the GPU, "
                             "region-of-interest decoding; pip install nvidia-dali-cuda130); see imagenet.data.decode")
    skip_bad_images: bool = _opt(False, "--skip-bad-images", help="skip (and count) corrupt or unreadable "
                                 "images instead of stopping at the first one", action="store_true")
    stage_dir: Optional[str] = _opt(None, "--stage-dir", help="copy DATA to this node-local folder ($TMPDIR, "
                                     "/dev/shm, a local NVMe) once per node before training and read the copy; a "
                                     "complete earlier copy is reused. Each process expands $VARS itself, so "
                                     "'$TMPDIR' is every node's own folder; see imagenet.data.staging", metavar="DIR")
    stage_verify: bool = _opt(False, "--stage-verify", help="with --stage-dir: also compare the copy's checksums "
                              "with the source's (reads both once more)", action="store_true")
    steps_per_epoch: int = _opt(0, "--steps-per-epoch", help="stop each training epoch after this many steps "
                                "(0: the whole dataset); for benchmarks and smoke tests", type=int)
    val_steps: int = _opt(0, "--val-steps", help="validate on at most this many batches per rank (0: all)",
                          type=int)
    dummy_size: int = _opt(1_281_167, "--dummy-size", help="images per epoch with --dummy", type=int)
    num_classes: int = _opt(1000, "--num-classes", help="classes with --dummy (real data: from the folders)",
                            type=int)

    # --- model
    arch: str = _opt("resnet18", "-a", "--arch", help="torchvision model name", metavar="ARCH")
    pretrained: bool = _opt(False, "--pretrained", help="start from torchvision's pretrained weights",
                            action="store_true")
    zero_init_residual: bool = _opt(False, "--zero-init-residual", help="zero the last BatchNorm weight of each "
                                    "residual block, so each block starts as the identity (Goyal et al. 2017)",
                                    action="store_true")
    model_ema: bool = _opt(False, "--model-ema", help="keep an exponential moving average of the weights, "
                           "validated beside the model and checkpointed", action="store_true")
    model_ema_steps: int = _opt(32, "--model-ema-steps", help="update the average every N optimizer steps",
                                type=int)
    model_ema_decay: float = _opt(0.99998, "--model-ema-decay", help="the average's decay, adjusted to the global "
                                  "batch and epochs as torchvision's reference does", type=float)
    channels_last: Optional[bool] = _opt(None, "--channels-last", help="NHWC memory format (default: on for "
                                         "CUDA, where tensor-core convs want it; off on CPU, where it is slower)",
                                         action=argparse.BooleanOptionalAction)
    sync_bn: bool = _opt(False, "--sync-bn", help="synchronise BatchNorm statistics across DDP ranks",
                         action="store_true")
    compile: bool = _opt(False, "--compile", help="torch.compile the model", action="store_true")
    compile_mode: str = _opt("default", "--compile-mode", help="torch.compile mode; any but 'default' implies "
                             "--compile. reduce-overhead adds CUDA graphs (fewer kernel launches per step); "
                             "max-autotune also benchmarks kernel choices (minutes of compiling)",
                             choices=COMPILE_MODES)

    # --- optimisation
    epochs: int = _opt(90, "--epochs", help="total epochs to run", type=int)
    start_epoch: int = _opt(0, "--start-epoch", help="epoch number to start at (useful on restarts)", type=int)
    batch_size: int = _opt(256, "-b", "--b", "--batch-size", help="batch size PER PROCESS (per NODE with "
                           "--dist-url, divided among its processes, as in pytorch/examples; the global "
                           "batch is printed at start)", type=int)
    lr: float = _opt(0.1, "--lr", "--learning-rate", help="base learning rate for a global batch of 256 "
                     "(scaled linearly, see --lr-scaling)", type=float)
    lr_scaling: str = _opt("linear", "--lr-scaling", help="linear: lr * global_batch / 256; none: use --lr "
                           "as given", choices=("linear", "none"))
    opt: str = _opt("sgd", "--opt", help="optimizer: sgd (momentum), lars (MLPerf's; norm and bias "
                    "parameters unadapted), lamb", choices=("sgd", "lars", "lamb"))
    lars_coefficient: float = _opt(0.001, "--lars-coefficient", help="LARS trust coefficient (eeta)", type=float)
    accum_steps: int = _opt(1, "--accum-steps", help="micro-batches per optimizer step: the global batch is "
                            "-b x processes x this; see docs/recipes.md for what differs with BatchNorm", type=int)
    lr_schedule: str = _opt("step", "--lr-schedule", "--lr-scheduler", help="per step: step (x0.1 at --lr-steps), "
                            "cosine, poly (MLPerf: --lr-power, --lr-end) or ramp (FFCV: linear up to "
                            "--lr-peak-epoch, then down to 0)", choices=("step", "cosine", "poly", "ramp"))
    lr_warmup_decay: Optional[float] = _opt(None, "--lr-warmup-decay", help="the warm-up's start factor of the "
                                            "peak LR (default: (step+1)/warm-up steps)", type=float)
    lr_power: float = _opt(2.0, "--lr-power", help="poly schedule's power", type=float)
    lr_end: float = _opt(0.0, "--lr-end", help="poly schedule's end LR", type=float)
    lr_peak_epoch: float = _opt(2.0, "--lr-peak-epoch", help="ramp schedule's peak epoch", type=float)
    lr_steps: tuple = _opt((30, 60, 80), "--lr-steps", help="epochs where the step schedule divides lr by 10",
                           type=int, nargs="+")
    warmup_epochs: Optional[float] = _opt(None, "--warmup-epochs", "--lr-warmup-epochs", help="linear warm-up length (default: 5 "
                                          "when the scaled lr exceeds the base lr, else 0)", type=float)
    momentum: float = _opt(0.9, "--momentum", help="SGD momentum", type=float)
    optimizer_impl: str = _opt("auto", "--optimizer-impl", help="SGD kernels: fused (one kernel for all "
                               "parameters), foreach (batched), default (torch's choice); auto: fused where "
                               "the device supports it, else torch's choice",
                               choices=("auto", "fused", "foreach", "default"))
    weight_decay: float = _opt(1e-4, "--wd", "--weight-decay", help="weight decay", type=float)
    no_bn_wd: bool = _opt(False, "--no-bn-wd", help="no weight decay on BatchNorm and bias parameters",
                          action="store_true")
    norm_weight_decay: Optional[float] = _opt(None, "--norm-weight-decay", help="weight decay of normalisation "
                                              "layers (default: 0 with --no-bn-wd, else --wd)", type=float)
    label_smoothing: float = _opt(0.0, "--label-smoothing", help="cross-entropy label smoothing", type=float)
    desired_acc: Optional[float] = _opt(None, "--desired-acc", help="stop once validation top-1 reaches this "
                                        "(0.75 or 75 both mean 75%%)", type=float)

    # --- precision (imagenet_ddp_apex.py; every variant accepts them)
    opt_level: Optional[str] = _opt(None, "--opt-level", help="O0 fp32, O1 autocast, O2 half model + fp32 "
                                    "master weights, O3 pure half (default O0; O1 for the amp variant)",
                                    choices=OPT_LEVELS)
    keep_batchnorm_fp32: Optional[str] = _opt(None, "--keep-batchnorm-fp32", help="True/False: keep "
                                              "BatchNorm in fp32 (default: per opt level, as Apex)")
    loss_scale: str = _opt("dynamic", "--loss-scale", help="'dynamic' or a fixed float loss scale")
    amp_backend: str = _opt("auto", "--amp-backend", help="auto: NVIDIA Apex if apex.amp imports, else "
                            "native torch.amp", choices=("auto", "native", "apex"))
    amp_dtype: Optional[str] = _opt(None, "--amp-dtype", help="half type (default float16 on CUDA, "
                                    "bfloat16 on CPU)", choices=("float16", "bfloat16"))

    # --- distributed
    world_size: int = _opt(-1, "--world-size", help="with --dist-url: number of NODES (pytorch/examples "
                           "semantics)", type=int)
    rank: int = _opt(-1, "--rank", help="with --dist-url: this node's rank", type=int)
    dist_url: Optional[str] = _opt(None, "--dist-url", help="tcp://MASTER_IP:PORT for node-level launch "
                                   "(one process per local GPU is spawned)")
    dist_backend: Optional[str] = _opt(None, "--dist-backend", help="nccl, gloo or mpi (default: nccl on "
                                       "GPUs, gloo on CPU)", choices=("nccl", "gloo", "mpi"))
    multiprocessing_distributed: bool = _opt(False, "--multiprocessing-distributed", help="spawn one "
                                             "process per local GPU (implied by --dist-url)",
                                             action="store_true")
    procs_per_node: Optional[int] = _opt(None, "--procs-per-node", help="processes to spawn per node with "
                                         "--dist-url (default: the GPU count, 1 on CPU)", type=int)
    local_rank: Optional[int] = _opt(None, "--local-rank", "--local_rank", help="set by "
                                     "torch.distributed.launch (LOCAL_RANK is read too)", type=int)
    gpu: Optional[int] = _opt(None, "--gpu", help="GPU id to use (single-process variants)", type=int)
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

    # --- run, logging, checkpoints
    print_freq: int = _opt(10, "-p", "--print-freq", help="print and log every N steps", type=int)
    profile_steps: int = _opt(0, "--profile-steps", help="record N training steps after the warm-up with "
                              "torch.profiler: device time per kernel into run.json (profile), a Chrome trace "
                              "into the run folder; profiled steps run slower, so not for benchmarks", type=int)
    step_times: bool = _opt(False, "--step-times", help="keep each steady-state step's wall time in run.json "
                            "(CUDA events on GPUs, read at print boundaries: no extra host sync); the scaling "
                            "model's straggler term needs their distribution", action="store_true")
    checkpoint_every_steps: int = _opt(0, "--checkpoint-every-steps", help="also checkpoint every N training "
                                       "steps, mid-epoch (0: only at epoch ends and stop signals); the write "
                                       "runs in the background, see imagenet.checkpoint_writer", type=int,
                                       metavar="N")
    checkpoint_every_minutes: float = _opt(30.0, "--checkpoint-every-minutes", help="also checkpoint every M "
                                           "minutes of training, at the first print boundary after M minutes "
                                           "(every rank agrees there), so a crash loses at most M minutes; "
                                           "0: off", type=float, metavar="M")
    keep_checkpoints: int = _opt(2, "--keep-checkpoints", help="keep the last K checkpoints as "
                                 "checkpoint-eEPOCH-SAMPLE.pth.tar next to checkpoint.pth.tar (the newest) and "
                                 "model_best.pth.tar (0: only those two)", type=int, metavar="K")
    straggler_threshold: float = _opt(0.2, "--straggler-threshold", help="at print boundaries, log the "
                                      "slowest rank and its host when its step or data-wait time exceeds the "
                                      "median by this fraction of a step (0.2: 20%%); 0: never",
                                      type=float)
    resume: str = _opt("", "--resume", help="checkpoint to resume from, or 'auto' for the run folder's "
                       "latest", metavar="PATH")
    evaluate: bool = _opt(False, "-e", "--evaluate", help="validate only", action="store_true")
    seed: Optional[int] = _opt(None, "--seed", help="seed everything; with --deterministic, bit-exact "
                               "reruns and resumes", type=int)
    deterministic: bool = _opt(False, "--deterministic", help="deterministic kernels (slower)",
                               action="store_true")
    log_dir: Optional[str] = _opt(None, "--log-dir", help="run folder for TensorBoard, checkpoints and "
                                  "run.json (default runs/<date>_<host>_<arch>_gpux<world>_b<batch>_<prec>)")

    variant: str = _opt("ddp", "--variant", help="nd | dp | ddp | amp (set by the entry scripts)",
                        choices=VARIANTS)

    # ---- derived views (never stored back)
    @property
    def precision_level(self) -> str:
        return self.opt_level or ("O1" if self.variant == "amp" else "O0")

    def use_channels_last(self, device_type: str) -> bool:
        return self.channels_last if self.channels_last is not None else device_type == "cuda"

    @property
    def use_compile(self) -> bool:
        return self.compile or self.compile_mode != "default"

    @property
    def distributed(self) -> bool:
        return self.variant in ("ddp", "amp")

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}


def build_parser(variant: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=f"Train a torchvision model on ImageNet ({variant} variant)",
        allow_abbrev=False,  # '--b' must mean --batch-size, not any flag starting with b
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(TrainConfig):
        meta = dict(f.metadata)
        flags = meta.pop("flags")
        if f.name == "variant" and variant != "any":
            continue  # the entry script fixes it
        if flags[0].startswith("-"):
            parser.add_argument(*flags, dest=f.name, default=f.default, **meta)
        else:
            parser.add_argument(flags[0], default=f.default, **meta)
    return parser


def _check_recipe_components(cfg: TrainConfig) -> None:
    """The large-batch components' settings (optimizer, schedule, EMA, resolution, accumulation)."""
    from .data.resolution import ResolutionRamp

    if cfg.accum_steps < 1:
        raise ConfigError(f"--accum-steps must be at least 1 (got {cfg.accum_steps})")
    if cfg.accum_steps > 1 and cfg.amp_backend == "apex":
        raise ConfigError("--accum-steps with --amp-backend apex: Apex would unscale the gradients once per "
                          "micro-batch; use --amp-backend native")
    if cfg.lars_coefficient <= 0 or cfg.lr_power <= 0 or cfg.lr_end < 0:
        raise ConfigError(f"--lars-coefficient {cfg.lars_coefficient:g} and --lr-power {cfg.lr_power:g} must be "
                          f"positive, --lr-end {cfg.lr_end:g} at least 0")
    if cfg.lr_warmup_decay is not None and not 0 <= cfg.lr_warmup_decay <= 1:
        raise ConfigError(f"--lr-warmup-decay is a start factor in [0, 1] (got {cfg.lr_warmup_decay:g})")
    if cfg.lr_schedule == "ramp" and not 0 < cfg.lr_peak_epoch < cfg.epochs:
        raise ConfigError(f"--lr-peak-epoch {cfg.lr_peak_epoch:g} must lie between 0 and --epochs {cfg.epochs}")
    if cfg.norm_weight_decay is not None and cfg.norm_weight_decay < 0:
        raise ConfigError(f"--norm-weight-decay must be >= 0 (got {cfg.norm_weight_decay:g})")
    if cfg.model_ema_steps < 1 or not 0 <= cfg.model_ema_decay < 1:
        raise ConfigError(f"--model-ema-steps {cfg.model_ema_steps} must be >= 1 and --model-ema-decay "
                          f"{cfg.model_ema_decay:g} in [0, 1)")
    if cfg.mixup_alpha < 0 or cfg.cutmix_alpha < 0:
        raise ConfigError(f"--mixup-alpha {cfg.mixup_alpha:g} / --cutmix-alpha {cfg.cutmix_alpha:g} must be >= 0 "
                          "(0 turns each off)")
    if cfg.zero_init_residual and cfg.pretrained:
        raise ConfigError("--zero-init-residual initialises a new model; drop it or --pretrained")
    for flag, size in (("--val-resize-size", cfg.val_resize_size), ("--val-crop-size", cfg.val_crop_size)):
        if size is not None and size < 16:
            raise ConfigError(f"{flag} must be at least 16 (got {size})")
    if (cfg.min_res is None) != (cfg.max_res is None):
        raise ConfigError("progressive resizing needs both --min-res and --max-res (or neither)")
    if cfg.min_res is not None:
        problem = ResolutionRamp(cfg.min_res, cfg.max_res, cfg.start_ramp, cfg.end_ramp).problem()
        if problem:
            raise ConfigError(problem)
        if cfg.data_backend == "dali":
            raise ConfigError("--min-res/--max-res: the dali backend fixes its resize size when its pipeline is "
                              "built; use --data-backend fast, device or pil for progressive resizing")


def _check(cfg: TrainConfig) -> None:
    if cfg.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1 (got {cfg.batch_size})")
    if cfg.epochs < 1 or cfg.start_epoch < 0 or cfg.start_epoch > cfg.epochs:
        raise ConfigError(f"--epochs {cfg.epochs} / --start-epoch {cfg.start_epoch}: need "
                          "0 <= start-epoch <= epochs and epochs >= 1")
    if cfg.image_size < 16:
        raise ConfigError(f"--image-size must be at least 16 (got {cfg.image_size})")
    if cfg.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (got {cfg.workers})")
    if not cfg.dummy and not cfg.data:
        raise ConfigError("no dataset given: pass the ImageNet root DIR (holding train/ and val/) or --dummy")
    if cfg.collective_timeout <= 0 or cfg.dist_timeout <= 0:
        raise ConfigError(f"--collective-timeout {cfg.collective_timeout:g} / --dist-timeout {cfg.dist_timeout:g}: "
                          "give positive seconds (e.g. 300 and 1800)")
    if cfg.stage_verify and not cfg.stage_dir:
        raise ConfigError("--stage-verify checks a staged copy: add --stage-dir DIR")
    if cfg.desired_acc is not None and not 0 < cfg.desired_acc <= 1:
        raise ConfigError(f"--desired-acc must be a fraction (0.75) or percentage (75), got {cfg.desired_acc}")
    if cfg.loss_scale != "dynamic":
        try:
            float(cfg.loss_scale)
        except ValueError:
            raise ConfigError(f"--loss-scale must be 'dynamic' or a number, got {cfg.loss_scale!r}") from None
    if cfg.keep_batchnorm_fp32 not in (None, "True", "False"):
        raise ConfigError(f"--keep-batchnorm-fp32 takes True or False, got {cfg.keep_batchnorm_fp32!r}")
    if cfg.ddp_bucket_cap_mb is not None and cfg.ddp_bucket_cap_mb <= 0:
        raise ConfigError(f"--ddp-bucket-cap-mb must be positive (got {cfg.ddp_bucket_cap_mb})")
    if cfg.checkpoint_every_steps < 0 or cfg.checkpoint_every_minutes < 0 or cfg.keep_checkpoints < 0:
        raise ConfigError(f"--checkpoint-every-steps {cfg.checkpoint_every_steps}, --checkpoint-every-minutes "
                          f"{cfg.checkpoint_every_minutes} and --keep-checkpoints {cfg.keep_checkpoints} must be "
                          ">= 0 (0 turns each off)")
    if cfg.straggler_threshold < 0:
        raise ConfigError(f"--straggler-threshold must be >= 0 (got {cfg.straggler_threshold}; 0 turns it off)")
    _check_recipe_components(cfg)
    if cfg.dist_url and cfg.variant in ("nd", "dp"):
        raise ConfigError(f"--dist-url needs a distributed variant; use imagenet_ddp.py, not the {cfg.variant} one")
    if cfg.dist_url and (cfg.world_size < 1 or not 0 <= cfg.rank < cfg.world_size):
        raise ConfigError(f"--dist-url needs --world-size NODES >= 1 and 0 <= --rank < NODES "
                          f"(got --world-size {cfg.world_size} --rank {cfg.rank})")


def parse(argv: Optional[Sequence[str]] = None, variant: str = "ddp") -> TrainConfig:
    """Parse a command line into a checked, frozen config. Raises ConfigError on bad values."""
    args = vars(build_parser(variant).parse_args(argv))
    if variant != "any":
        args["variant"] = variant
    if args["desired_acc"] is not None and args["desired_acc"] > 1:
        args["desired_acc"] = args["desired_acc"] / 100.0  # 75 means 75 %
    args["lr_steps"] = tuple(args["lr_steps"])
    cfg = TrainConfig(**args)
    _check(cfg)
    return cfg
