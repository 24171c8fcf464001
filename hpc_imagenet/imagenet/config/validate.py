"""The one validation pass: every check of the settings that needs neither torch nor a device.

Every rank runs it before the rendezvous, the staging copy and the dataset scan, so a typo costs
seconds, not a 144 GB copy. What can only be known on the device (fused kernels, CUDA, Apex being
importable, the images themselves) is checked where it is used; everything else is here.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
from pathlib import Path
from typing import Any, Iterable, Optional, Tuple

from hpc_imagenet.imagenet.data.resolution import ResolutionRamp
from hpc_imagenet.imagenet.recipes import ROW_KEYS, Recipe
from hpc_imagenet.imagenet.config.choices import (BATCH_DATA_BACKENDS, DATA_BACKENDS, LAYERWISE_OPTIMIZERS, MODELS,
                                                  RESIDUAL_MODELS)
from hpc_imagenet.imagenet.config.errors import ConfigError
from hpc_imagenet.imagenet.config.sections import Settings, setting_fields

# Settings a recipe or --config file may not set: they size the global batch that the file's values
# depend on, or pick the files themselves; the command line decides them.
COMMAND_LINE_ONLY = ("batch_size", "accum_steps", "workers", "world_size", "rank", "dist_url",
                     "multiprocessing_distributed", "procs_per_node", "no_accel", "variant", "recipe", "config")
# A flag's type -> what a file's value must be, in words, and the Python types TOML gives for it.
FILE_KINDS = {int: ("an integer", (int,)), float: ("a number", (int, float)), None: ("a string", (str,))}


def _unknown(flag: str, value: str, known: Iterable[str]) -> ConfigError:
    """'unknown FLAG VALUE', the closest known names, and the list (or where to read it when long)."""
    known = sorted(known)
    close = difflib.get_close_matches(value, known, n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    listing = f"choose one of: {', '.join(known)}" if len(known) <= 12 else "see --help and docs/configuration.md"
    return ConfigError(f"unknown {flag} {value!r}; {hint}{listing}")


def _check_choices(settings: Settings) -> None:
    if settings.model.arch not in MODELS:
        raise _unknown("model -a", settings.model.arch, MODELS)
    if settings.data.data_backend not in DATA_BACKENDS:
        raise _unknown("--data-backend", settings.data.data_backend, DATA_BACKENDS)


def _check_data(settings: Settings, check_folder: bool) -> None:
    data = settings.data
    if data.image_size < 16:
        raise ConfigError(f"--image-size must be at least 16 (got {data.image_size})")
    if data.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (got {data.workers})")
    if not data.dummy and not data.root:
        raise ConfigError("no dataset given: pass the ImageNet root DIR (holding train/ and val/) or --dummy")
    if data.stage_verify and not data.stage_dir:
        raise ConfigError("--stage-verify checks a staged copy: add --stage-dir DIR")
    if data.stage_cleanup is not None and not data.stage_dir:
        raise ConfigError("--stage-cleanup / --no-stage-cleanup say what becomes of a staged copy: add --stage-dir DIR")
    if data.skip_bad_images and data.data_backend in BATCH_DATA_BACKENDS:
        raise ConfigError(f"--skip-bad-images does not work with --data-backend {data.data_backend} (it decodes "
                          "whole batches); drop --skip-bad-images or use --data-backend fast")
    if check_folder and not data.dummy and not Path(data.root).is_dir():
        problem = "is not a folder" if Path(data.root).exists() else "does not exist"
        raise ConfigError(f"dataset directory {data.root} {problem}; give the ImageNet root holding train/ and "
                          "val/ (or a shard folder), or --dummy")


def _check_optim(settings: Settings) -> None:
    optim = settings.optim
    if optim.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1 (got {optim.batch_size})")
    if optim.epochs < 1 or optim.start_epoch < 0 or optim.start_epoch > optim.epochs:
        raise ConfigError(f"--epochs {optim.epochs} / --start-epoch {optim.start_epoch}: need "
                          "0 <= start-epoch <= epochs and epochs >= 1")
    if optim.desired_acc is not None and not 0 < optim.desired_acc <= 1:
        raise ConfigError(f"--desired-acc must be a fraction (0.75) or percentage (75), got {optim.desired_acc}")
    if optim.eval_every < 1:
        raise ConfigError(f"--eval-every must be at least 1 epoch (got {optim.eval_every})")
    if not 0 <= optim.eval_offset <= optim.eval_every:
        raise ConfigError(f"--eval-offset {optim.eval_offset}: the first validation's epoch, from 1 to --eval-every "
                          f"{optim.eval_every} (0: after {optim.eval_every})")
    if optim.time_budget_minutes is not None and optim.time_budget_minutes <= 0:
        raise ConfigError(f"--time-budget-minutes must be positive (got {optim.time_budget_minutes})")


def _check_schedule(settings: Settings) -> None:
    """The large-batch optimizer and schedule settings (docs/recipes.md)."""
    optim = settings.optim
    if optim.accum_steps < 1:
        raise ConfigError(f"--accum-steps must be at least 1 (got {optim.accum_steps})")
    if optim.accum_steps > 1 and settings.precision.amp_backend == "apex":
        raise ConfigError("--accum-steps with --amp-backend apex: Apex would unscale the gradients once per "
                          "micro-batch; use --amp-backend native")
    if optim.lars_coefficient <= 0 or optim.lr_power <= 0 or optim.lr_end < 0:
        raise ConfigError(f"--lars-coefficient {optim.lars_coefficient:g} and --lr-power {optim.lr_power:g} must "
                          f"be positive, --lr-end {optim.lr_end:g} at least 0")
    if optim.lr_warmup_decay is not None and not 0 <= optim.lr_warmup_decay <= 1:
        raise ConfigError(f"--lr-warmup-decay is a start factor in [0, 1] (got {optim.lr_warmup_decay:g})")
    if optim.lr_schedule == "ramp" and not 0 < optim.lr_peak_epoch < optim.epochs:
        raise ConfigError(f"--lr-peak-epoch {optim.lr_peak_epoch:g} must lie between 0 and --epochs {optim.epochs}")
    if optim.norm_weight_decay is not None and optim.norm_weight_decay < 0:
        raise ConfigError(f"--norm-weight-decay must be >= 0 (got {optim.norm_weight_decay:g})")
    if optim.lr_warmup_from_base and (optim.lr_warmup_decay is not None or optim.lr_scaling != "linear"):
        raise ConfigError("--lr-warmup-from-base starts the warm-up at --lr below the linearly scaled peak: drop "
                          "--lr-warmup-decay, and use --lr-scaling linear")
    if optim.lr_gamma <= 0 or optim.lr_min < 0:
        raise ConfigError(f"--lr-gamma {optim.lr_gamma:g} must be positive and --lr-min {optim.lr_min:g} at least 0")
    if optim.clip_grad_norm is not None and optim.clip_grad_norm <= 0:
        raise ConfigError(f"--clip-grad-norm is the largest gradient norm, > 0 (got {optim.clip_grad_norm:g})")
    if optim.bias_weight_decay is not None and optim.bias_weight_decay < 0:
        raise ConfigError(f"--bias-weight-decay must be >= 0 (got {optim.bias_weight_decay:g})")
    if optim.bce_target_thresh is not None and not (optim.bce_loss and 0 < optim.bce_target_thresh < 1):
        raise ConfigError(f"--bce-target-thresh {optim.bce_target_thresh:g} binarises --bce-loss's targets: give a "
                          "value in (0, 1) with --bce-loss")
    _check_layerwise_decay(settings)
    _check_timm_schedule(settings)


def _check_timm_schedule(settings: Settings) -> None:
    """timm's schedule and LAMB settings (hpc_imagenet/imagenet/train/schedules.py,
    hpc_imagenet/imagenet/train/layerwise.py)."""
    optim = settings.optim
    if optim.warmup_lr is not None:
        if optim.warmup_lr < 0:
            raise ConfigError(f"--warmup-lr is the LR the warm-up starts from, >= 0 (got {optim.warmup_lr:g})")
        if optim.lr_warmup_decay is not None or optim.lr_warmup_from_base:
            raise ConfigError("--warmup-lr, --lr-warmup-decay and --lr-warmup-from-base each set where the warm-up "
                              "starts: give one")
    if optim.cosine_from_start and optim.lr_schedule != "cosine":
        raise ConfigError(f"--cosine-from-start shapes the cosine schedule, not --lr-schedule {optim.lr_schedule}: "
                          "drop it or use --lr-schedule cosine")
    if optim.lamb_max_grad_norm is not None and (optim.opt != "lamb" or optim.lamb_max_grad_norm <= 0):
        raise ConfigError(f"--lamb-max-grad-norm {optim.lamb_max_grad_norm:g} is LAMB's clipping norm: give a value "
                          "> 0 with --opt lamb (other optimizers: --clip-grad-norm)")
    if not 0 <= optim.label_smoothing < 1:
        raise ConfigError(f"--label-smoothing is a fraction in [0, 1) (got {optim.label_smoothing:g})")


def _check_layerwise_decay(settings: Settings) -> None:
    """LARS and LAMB leave norm and bias parameters out of weight decay and of the trust ratio, as
    MLPerf's LARS skip list does (hpc_imagenet/imagenet/train/layerwise.py; the parser records --no-bn-wd for them): a
    decay asked for norm layers would be ignored."""
    optim = settings.optim
    if optim.opt in LAYERWISE_OPTIMIZERS and optim.norm_weight_decay:
        raise ConfigError(f"--opt {optim.opt} applies no weight decay to normalisation layers (MLPerf's LARS skips "
                          f"them): drop --norm-weight-decay {optim.norm_weight_decay:g}, or use --opt sgd")


def _check_model_extras(settings: Settings) -> None:
    model = settings.model
    if model.model_ema_steps < 1 or not 0 <= model.model_ema_decay < 1:
        raise ConfigError(f"--model-ema-steps {model.model_ema_steps} must be >= 1 and --model-ema-decay "
                          f"{model.model_ema_decay:g} in [0, 1)")
    if model.eval_weights == "ema" and not model.model_ema:
        raise ConfigError("--eval-weights ema scores the average of the weights: add --model-ema or drop it")
    if model.weights and model.pretrained:
        raise ConfigError(f"--weights {model.weights} and --pretrained both pick starting weights: give one")
    if not 0 <= model.drop_path_rate < 1:
        raise ConfigError(f"--drop-path-rate is a probability in [0, 1) (got {model.drop_path_rate:g})")
    if model.drop_path_rate and model.arch not in RESIDUAL_MODELS:
        raise ConfigError(f"--drop-path-rate drops residual branches of resnet*, resnext* and wide_resnet* here, "
                          f"not of {model.arch}")
    if model.zero_init_residual and (model.pretrained or model.weights):
        raise ConfigError("--zero-init-residual initialises a new model; drop it or --pretrained")
    if model.zero_init_residual and model.arch not in RESIDUAL_MODELS:
        raise ConfigError(f"--zero-init-residual needs a residual network (resnet*, resnext*, wide_resnet*), "
                          f"not {model.arch}")


def _check_sizes(settings: Settings) -> None:
    """Validation sizes, progressive resizing and Mixup/CutMix."""
    data = settings.data
    for flag, size in (("--val-resize-size", data.val_resize_size), ("--val-crop-size", data.val_crop_size)):
        if size is not None and size < 16:
            raise ConfigError(f"{flag} must be at least 16 (got {size})")
    low, high = data.train_crop_scale
    if not 0 < low <= high <= 1:
        raise ConfigError(f"--train-crop-scale {low:g} {high:g}: give 0 < MIN <= MAX <= 1 (fractions of the image's "
                          "area, e.g. 0.08 1)")
    low, high = data.train_crop_ratio
    if not 0 < low <= high:
        raise ConfigError(f"--train-crop-ratio {low:g} {high:g}: give 0 < MIN <= MAX (width/height, e.g. 0.75 1.333, "
                          "or 1 1 for square crops)")
    if data.mixup_alpha < 0 or data.cutmix_alpha < 0:
        raise ConfigError(f"--mixup-alpha {data.mixup_alpha:g} / --cutmix-alpha {data.cutmix_alpha:g} must be "
                          ">= 0 (0 turns each off)")
    _check_augmentation(settings)
    if (data.min_res is None) != (data.max_res is None):
        raise ConfigError("progressive resizing needs both --min-res and --max-res (or neither)")
    if data.min_res is None:
        return
    problem = ResolutionRamp(data.min_res, data.max_res, data.start_ramp, data.end_ramp).problem()
    if problem:
        raise ConfigError(problem)
    if data.data_backend in BATCH_DATA_BACKENDS:
        raise ConfigError(f"--min-res/--max-res: the {data.data_backend} backend fixes its resize size when its "
                          "pipeline is built; use --data-backend fast, device or pil for progressive resizing")


def _check_augmentation(settings: Settings) -> None:
    """The per-image policy, random erasing and repeated augmentation (hpc_imagenet/imagenet/data/augment.py)."""
    data = settings.data
    if not 0 <= data.ra_magnitude <= 30 or data.ra_magnitude_std < 0:
        raise ConfigError(f"--ra-magnitude {data.ra_magnitude} is a bin of 0-30 and --ra-magnitude-std "
                          f"{data.ra_magnitude_std:g} must be >= 0")
    if not 1 <= data.augmix_severity <= 10:
        raise ConfigError(f"--augmix-severity must be 1-10 (got {data.augmix_severity})")
    if not 0 <= data.random_erase <= 1:
        raise ConfigError(f"--random-erase is a probability in [0, 1] (got {data.random_erase:g})")
    if data.ra_reps < 1:
        raise ConfigError(f"--ra-reps must be at least 1 (got {data.ra_reps})")
    if data.data_backend == "dali" and data.auto_augment in ("augmix", "cifar10", "svhn"):
        raise ConfigError(f"--auto-augment {data.auto_augment}: DALI has no such policy (it has ta_wide, ra and "
                          "imagenet); use one of them or --data-backend fast")
    if data.data_backend == "dali" and data.ra_magnitude_std:
        raise ConfigError("--ra-magnitude-std: DALI's RandAugment takes one magnitude; drop it or use "
                          "--data-backend fast")


def _check_precision(settings: Settings) -> None:
    precision = settings.precision
    if precision.loss_scale != "dynamic":
        try:
            float(precision.loss_scale)
        except ValueError:
            raise ConfigError(f"--loss-scale must be 'dynamic' or a number, got {precision.loss_scale!r}") from None
    if precision.keep_batchnorm_fp32 not in (None, "True", "False"):
        raise ConfigError(f"--keep-batchnorm-fp32 takes True or False, got {precision.keep_batchnorm_fp32!r}")
    if precision.amp_backend == "apex" and precision.amp_dtype == "bfloat16":
        raise ConfigError("Apex AMP scales float16 only; use --amp-dtype float16 or --amp-backend native")


def _check_dist(settings: Settings) -> None:
    dist = settings.dist
    if dist.collective_timeout <= 0 or dist.dist_timeout <= 0:
        raise ConfigError(f"--collective-timeout {dist.collective_timeout:g} / --dist-timeout "
                          f"{dist.dist_timeout:g}: give positive seconds (e.g. 300 and 1800)")
    if dist.ddp_bucket_cap_mb is not None and dist.ddp_bucket_cap_mb <= 0:
        raise ConfigError(f"--ddp-bucket-cap-mb must be positive (got {dist.ddp_bucket_cap_mb})")
    if dist.procs_per_node is not None and dist.procs_per_node < 1:
        raise ConfigError(f"--procs-per-node must be at least 1 (got {dist.procs_per_node})")
    if dist.dist_url and not settings.distributed:
        raise ConfigError(f"--dist-url needs a distributed variant; use imagenet_ddp.py, not the "
                          f"{settings.run.variant} one")
    if dist.dist_url and (dist.world_size < 1 or not 0 <= dist.rank < dist.world_size):
        raise ConfigError(f"--dist-url needs --world-size NODES >= 1 and 0 <= --rank < NODES "
                          f"(got --world-size {dist.world_size} --rank {dist.rank})")
    if settings.batch.launcher == "dist-url" and not dist.dist_url:  # --multiprocessing-distributed, no launcher
        raise ConfigError("--multiprocessing-distributed needs --dist-url tcp://MASTER_IP:PORT "
                          "--world-size NODES --rank NODE")


def _check_outputs(settings: Settings) -> None:
    ckpt = settings.checkpoint
    if ckpt.checkpoint_every_steps < 0 or ckpt.checkpoint_every_minutes < 0 or ckpt.keep_checkpoints < 0:
        raise ConfigError(f"--checkpoint-every-steps {ckpt.checkpoint_every_steps}, --checkpoint-every-minutes "
                          f"{ckpt.checkpoint_every_minutes} and --keep-checkpoints {ckpt.keep_checkpoints} must be "
                          ">= 0 (0 turns each off)")
    if settings.logging.straggler_threshold < 0:
        raise ConfigError(f"--straggler-threshold must be >= 0 (got {settings.logging.straggler_threshold}; "
                          "0 turns it off)")


def validate(settings: Settings, check_data: bool = True) -> None:
    """Raise ConfigError (one line naming the fix) for the first setting that cannot work.
    ``check_data``: also require the dataset folder to exist (skipped by --print-config)."""
    _check_choices(settings)
    _check_data(settings, check_data)
    _check_optim(settings)
    _check_schedule(settings)
    _check_model_extras(settings)
    _check_sizes(settings)
    _check_precision(settings)
    _check_dist(settings)
    _check_outputs(settings)


def _closest_setting(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key.replace("-", "_").lstrip("_"), list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def _expected(setting: dataclasses.Field) -> Tuple[str, tuple, bool]:
    """What a file may give SETTING: its words for the error, the Python types, and whether a list."""
    meta = setting.metadata
    if meta.get("action") in ("store_true", argparse.BooleanOptionalAction):
        return "true or false", (bool,), False
    words, types = FILE_KINDS.get(meta.get("type"), FILE_KINDS[None])
    many = "nargs" in meta
    return (f"a list of {words.split(' ', 1)[1]}s" if many else words), types, many


def _fits(value: Any, types: tuple, many: bool) -> bool:
    if many != isinstance(value, list):
        return False
    # TOML's true is a Python int too: only a yes/no setting takes it
    return all(isinstance(item, types) and (bool in types or not isinstance(item, bool))
               for item in (value if many else [value]))


def _check_value(origin: str, key: str, value: Any, fields: dict) -> None:
    if key not in fields:
        hint = _closest_setting(key, fields)
        raise ConfigError(f"{origin} sets {key!r}, which is no setting; {hint}the settings are the flags' "
                          "long names with _ for - (see --help)")
    if key in COMMAND_LINE_ONLY:
        raise ConfigError(f"{origin} sets {key}, which sizes the global batch or picks the files: give it on the "
                          "command line instead")
    words, types, many = _expected(fields[key])
    if not _fits(value, types, many):
        raise ConfigError(f"{origin}: {key} must be {words} (got {value!r})")
    choices = fields[key].metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{origin}: {key} {value!r} is not one of {', '.join(choices)}")


def check_recipe(recipe: Recipe, origin: Optional[str] = None) -> None:
    """Raise ConfigError (one line) for a recipe or --config file whose keys are not the format's, name
    no setting, set what the command line decides, or hold a value its setting cannot take."""
    origin = origin or f"recipe {recipe.name} ({recipe.path})"
    if recipe.unknown:
        close = difflib.get_close_matches(recipe.unknown[0], ("values", "by_global_batch", "source"), n=1)
        hint = f"did you mean [{close[0]}]? " if close else ""
        raise ConfigError(f"{origin} has {recipe.unknown[0]!r}, which is not part of the format; {hint}settings go "
                          "under [values] (hpc_imagenet/imagenet/recipes/README.md)")
    fields = {f.name: f for _, f in setting_fields()}
    for row in recipe.by_global_batch:
        for key, value in row.items():
            if key not in ROW_KEYS:
                _check_value(f"{origin}, row global_batch = {row['global_batch']},", key, value, fields)
    for key, value in recipe.values.items():
        _check_value(origin, key, value, fields)
