"""The one validation pass: every check of the settings that needs neither torch nor a device.

Every rank runs it before the rendezvous, the staging copy and the dataset scan, so a typo costs
seconds, not a 144 GB copy. What can only be known on the device (fused kernels, CUDA, Apex being
importable, the images themselves) is checked where it is used; everything else is here.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Iterable

from .choices import BATCH_DATA_BACKENDS, DATA_BACKENDS, MODELS
from .errors import ConfigError
from .sections import Settings


def _unknown(flag: str, value: str, known: Iterable[str]) -> ConfigError:
    """'unknown FLAG VALUE', the closest known names, and the list (or where to read it when long)."""
    known = sorted(known)
    close = difflib.get_close_matches(value, known, n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    listing = f"choose one of: {', '.join(known)}" if len(known) <= 12 else "see --help and docs/configuration.md"
    return ConfigError(f"unknown {flag} {value!r}; {hint}{listing}")


def _check_choices(s: Settings) -> None:
    if s.model.arch not in MODELS:
        raise _unknown("model -a", s.model.arch, MODELS)
    if s.data.data_backend not in DATA_BACKENDS:
        raise _unknown("--data-backend", s.data.data_backend, DATA_BACKENDS)


def _check_data(s: Settings, check_folder: bool) -> None:
    data = s.data
    if data.image_size < 16:
        raise ConfigError(f"--image-size must be at least 16 (got {data.image_size})")
    if data.workers < 0:
        raise ConfigError(f"--workers must be >= 0 (got {data.workers})")
    if not data.dummy and not data.root:
        raise ConfigError("no dataset given: pass the ImageNet root DIR (holding train/ and val/) or --dummy")
    if data.stage_verify and not data.stage_dir:
        raise ConfigError("--stage-verify checks a staged copy: add --stage-dir DIR")
    if data.skip_bad_images and data.data_backend in BATCH_DATA_BACKENDS:
        raise ConfigError(f"--skip-bad-images does not work with --data-backend {data.data_backend} (it decodes "
                          "whole batches); drop --skip-bad-images or use --data-backend fast")
    if check_folder and not data.dummy and not Path(data.root).is_dir():
        problem = "is not a folder" if Path(data.root).exists() else "does not exist"
        raise ConfigError(f"dataset directory {data.root} {problem}; give the ImageNet root holding train/ and "
                          "val/ (or a shard folder), or --dummy")


def _check_optim(s: Settings) -> None:
    optim = s.optim
    if optim.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1 (got {optim.batch_size})")
    if optim.epochs < 1 or optim.start_epoch < 0 or optim.start_epoch > optim.epochs:
        raise ConfigError(f"--epochs {optim.epochs} / --start-epoch {optim.start_epoch}: need "
                          "0 <= start-epoch <= epochs and epochs >= 1")
    if optim.desired_acc is not None and not 0 < optim.desired_acc <= 1:
        raise ConfigError(f"--desired-acc must be a fraction (0.75) or percentage (75), got {optim.desired_acc}")


def _check_precision(s: Settings) -> None:
    precision = s.precision
    if precision.loss_scale != "dynamic":
        try:
            float(precision.loss_scale)
        except ValueError:
            raise ConfigError(f"--loss-scale must be 'dynamic' or a number, got {precision.loss_scale!r}") from None
    if precision.keep_batchnorm_fp32 not in (None, "True", "False"):
        raise ConfigError(f"--keep-batchnorm-fp32 takes True or False, got {precision.keep_batchnorm_fp32!r}")
    if precision.amp_backend == "apex" and precision.amp_dtype == "bfloat16":
        raise ConfigError("Apex AMP scales float16 only; use --amp-dtype float16 or --amp-backend native")


def _check_dist(s: Settings) -> None:
    dist = s.dist
    if dist.collective_timeout <= 0 or dist.dist_timeout <= 0:
        raise ConfigError(f"--collective-timeout {dist.collective_timeout:g} / --dist-timeout "
                          f"{dist.dist_timeout:g}: give positive seconds (e.g. 300 and 1800)")
    if dist.ddp_bucket_cap_mb is not None and dist.ddp_bucket_cap_mb <= 0:
        raise ConfigError(f"--ddp-bucket-cap-mb must be positive (got {dist.ddp_bucket_cap_mb})")
    if dist.procs_per_node is not None and dist.procs_per_node < 1:
        raise ConfigError(f"--procs-per-node must be at least 1 (got {dist.procs_per_node})")
    if dist.dist_url and not s.distributed:
        raise ConfigError(f"--dist-url needs a distributed variant; use imagenet_ddp.py, not the "
                          f"{s.run.variant} one")
    if dist.dist_url and (dist.world_size < 1 or not 0 <= dist.rank < dist.world_size):
        raise ConfigError(f"--dist-url needs --world-size NODES >= 1 and 0 <= --rank < NODES "
                          f"(got --world-size {dist.world_size} --rank {dist.rank})")
    if s.batch.launcher == "dist-url" and not dist.dist_url:  # --multiprocessing-distributed, no launcher
        raise ConfigError("--multiprocessing-distributed needs --dist-url tcp://MASTER_IP:PORT "
                          "--world-size NODES --rank NODE")


def _check_outputs(s: Settings) -> None:
    ckpt = s.checkpoint
    if ckpt.checkpoint_every_steps < 0 or ckpt.checkpoint_every_minutes < 0 or ckpt.keep_checkpoints < 0:
        raise ConfigError(f"--checkpoint-every-steps {ckpt.checkpoint_every_steps}, --checkpoint-every-minutes "
                          f"{ckpt.checkpoint_every_minutes} and --keep-checkpoints {ckpt.keep_checkpoints} must be "
                          ">= 0 (0 turns each off)")
    if s.logging.straggler_threshold < 0:
        raise ConfigError(f"--straggler-threshold must be >= 0 (got {s.logging.straggler_threshold}; "
                          "0 turns it off)")


def validate(settings: Settings, check_data: bool = True) -> None:
    """Raise ConfigError (one line naming the fix) for the first setting that cannot work.
    ``check_data``: also require the dataset folder to exist (skipped by --print-config)."""
    _check_choices(settings)
    _check_data(settings, check_data)
    _check_optim(settings)
    _check_precision(settings)
    _check_dist(settings)
    _check_outputs(settings)
