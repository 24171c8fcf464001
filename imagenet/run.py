"""Build one run from a config and a DistInfo: model, precision, wrapper, data, logs; then fit.

Order matters and is kept in one place: the model is cast by the precision backend and the
checkpoint is loaded before the parallel wrapper is built, so DDP broadcasts the resumed weights
and the optimizer already points at O2's fp32 master weights.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import random
import socket
from pathlib import Path

import numpy as np
import torch

from . import checkpoint, distributed, ema, mixing, models, optim, precision, preemption, sysinfo, tblog
from .data import decode, loader, staging
from .data.resolution import ResolutionRamp
from .data.normalize import DeviceNormalizer
from .errors import one_line
from .engine import Parts, Trainer
from .runrecord import RunRecord

log = logging.getLogger(__name__)


def _seed_everything(cfg) -> None:
    if cfg.seed is not None:
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick the fastest kernels


def _run_dir(cfg, info, spec) -> Path:
    if cfg.log_dir:
        return Path(cfg.log_dir)
    name = (f"{datetime.datetime.now():%Y%m%d-%H%M%S}_{socket.gethostname()}_{cfg.arch}_gpux{info.world_size}"
            f"_b{cfg.batch_size}_{spec.label}")
    return Path(distributed.broadcast_object(str(Path("runs") / name)))  # every rank: rank 0's name


def _use_sync_bn(cfg, info) -> bool:
    if cfg.sync_bn and info.distributed and info.device.type != "cuda":
        if info.is_primary:  # torch's SyncBatchNorm runs on GPU modules only
            log.warning("--sync-bn needs CUDA GPUs: on CPU each rank keeps its own BatchNorm statistics")
        return False
    return cfg.sync_bn and info.distributed


def _wrap(model: torch.nn.Module, cfg, info) -> torch.nn.Module:
    if cfg.variant == "dp":
        if info.device.type != "cuda":
            log.warning("DataParallel: no CUDA GPU here, running on the CPU as a single device")
            return model
        return torch.nn.DataParallel(model)
    if info.distributed:
        return _ddp(model, cfg, info)
    return model


def _ddp(model: torch.nn.Module, cfg, info) -> torch.nn.parallel.DistributedDataParallel:
    """DDP with the --ddp-* flags; gradients are views into the all-reduce buckets (no extra copy)."""
    ids = [info.device.index] if info.device.type == "cuda" else None
    options = {"bucket_cap_mb": cfg.ddp_bucket_cap_mb} if cfg.ddp_bucket_cap_mb else {}
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                                    static_graph=cfg.ddp_static_graph, **options)
    if cfg.ddp_comm_hook != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hooks = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}
        ddp.register_comm_hook(None, hooks[cfg.ddp_comm_hook])  # None: the default process group
    return ddp


def _load_model_weights(model: torch.nn.Module, ckpt: dict, path: Path, arch: str) -> None:
    if ckpt.get("arch", arch) != arch:
        raise checkpoint.CheckpointError(f"{path} holds a {ckpt['arch']} model but -a is {arch}; "
                                         f"pass -a {ckpt['arch']} or another checkpoint")
    state = {k.removeprefix("module."): v for k, v in ckpt.get("model", ckpt.get("state_dict", {})).items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise checkpoint.CheckpointError(f"{path} does not fit this model ({str(e).splitlines()[0]}); "
                                         "check -a and the number of classes") from None


def _environment(info) -> dict:
    # Only rank 0 writes run.json; sparing the others the git calls matters at a thousand ranks.
    return sysinfo.collect(nodes=info.nodes) if info.is_primary else {}


def _announce(cfg, info, spec, lr, warmup, run_dir, steps) -> None:
    if not info.is_primary:
        return
    print(f"=> {cfg.variant} variant, {cfg.arch}, {info.world_size} process(es) on {info.device.type} "
          f"[{info.environment}{', ' + info.backend if info.backend else ''}], precision {spec.label} "
          f"({spec.backend})", flush=True)
    print(f"=> batch {cfg.batch_size} per process, global batch {cfg.batch_size * info.world_size}; lr {lr:.4g} "
          f"(base {cfg.lr:g} per 256, {cfg.lr_scaling} scaling), warm-up {warmup:g} epochs; {steps} steps/epoch",
          flush=True)
    print(f"=> run folder {run_dir} (TensorBoard: tensorboard --logdir {run_dir})", flush=True)


def _compiled(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """torch.compile for the training steps (evaluation runs the eager model: it compiles a second
    graph for eval-mode BatchNorm otherwise, for a few validation steps)."""
    return torch.compile(model, mode=None if cfg.compile_mode == "default" else cfg.compile_mode)


def _weight_average(model: torch.nn.Module, cfg, global_batch: int, warmup_steps: float):
    """--model-ema's average of MODEL's (possibly resumed) weights, or None."""
    if not cfg.model_ema:
        return None
    decay = ema.adjusted_decay(cfg.model_ema_decay, global_batch, cfg.model_ema_steps, cfg.epochs)
    return ema.WeightAverage(model, decay, cfg.model_ema_steps, warmup_steps)


def _resolution(cfg):
    """The progressive-resizing ramp, or None (train at --image-size throughout)."""
    if cfg.min_res is None:
        return None
    return ResolutionRamp(cfg.min_res, cfg.max_res, cfg.start_ramp, cfg.end_ramp)


def build_and_run(cfg, info: distributed.DistInfo) -> int:
    _seed_everything(cfg)
    spec = precision.resolve(cfg, info.device)
    # A collective: rank 0 scans the dataset and broadcasts it (the group exists: cli._run inits it first).
    # With --stage-dir every node reads its own copy of DATA (staging waits for every node's copier).
    data_cfg = dataclasses.replace(cfg, data=staging.stage_data(cfg, info))
    train_loader, val_loader, num_classes = loader.build_loaders(data_cfg, info.rank, info.world_size, info.device)
    run_dir = _run_dir(cfg, info, spec)
    channels_last = cfg.use_channels_last(info.device.type)
    model = models.prepare(models.build(cfg.arch, num_classes, cfg.pretrained, cfg.zero_init_residual), info.device,
                           channels_last, _use_sync_bn(cfg, info))
    global_batch = cfg.batch_size * info.world_size * cfg.accum_steps
    lr = optim.peak_lr(cfg, global_batch)
    warmup = optim.warmup_epochs(cfg, lr)
    optimizer = optim.build_optimizer(model, cfg, lr)
    if cfg.accum_steps > 1 and spec.backend == "apex":
        raise precision.PrecisionError("--accum-steps needs native mixed precision (Apex unscales per micro-batch); "
                                       "add --amp-backend native")
    prec = precision.build(spec, info.device)
    model, optimizer = prec.setup(model, optimizer)
    steps = len(train_loader) // cfg.accum_steps  # optimizer steps per epoch
    steps = min(steps, cfg.steps_per_epoch or steps)
    scheduler = optim.build_scheduler(optimizer, cfg, steps, warmup, lr)

    resume, ckpt = checkpoint.load_for_resume(cfg.resume, run_dir)
    if ckpt is not None:
        _load_model_weights(model, ckpt, resume, cfg.arch)

    raw_model = model
    wrapped = _wrap(model, cfg, info)
    step_model = _compiled(wrapped, cfg) if cfg.use_compile else wrapped
    eval_model = wrapped if isinstance(wrapped, torch.nn.DataParallel) else raw_model
    if info.is_primary:
        run_dir.mkdir(parents=True, exist_ok=True)
    record = RunRecord(run_dir, info.is_primary, config=cfg.to_dict(), data_root=data_cfg.data,
                       dist={"world_size": info.world_size, "backend": info.backend,
                             "environment": info.environment, "device": info.device.type, "nodes": info.nodes,
                             "local_world_size": info.local_world_size},
                       environment=_environment(info), data_decoder=decode.decoder_in_use(cfg.data_backend),
                       global_batch=global_batch, lr=lr,
                       precision={"label": spec.label, "backend": spec.backend, "level": spec.level})
    tb = tblog.make(info.is_primary, str(run_dir))
    parts = Parts(step_model, raw_model, eval_model, optimizer, scheduler, prec,
                  torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing).to(info.device),
                  train_loader, val_loader, DeviceNormalizer(info.device, channels_last), tb, record,
                  run_dir, ema=_weight_average(raw_model, cfg, global_batch, warmup * steps),
                  mix=mixing.build(cfg.mixup_alpha, cfg.cutmix_alpha, num_classes), accum_steps=cfg.accum_steps,
                  resolution=_resolution(cfg))
    trainer = Trainer(cfg, info, parts, preemption.for_run())
    if ckpt is not None and not cfg.evaluate:
        trainer.load_state_dict(ckpt)
        if info.is_primary:
            print(f"=> resumed from {resume}: epoch {trainer.state.epoch}, step {trainer.state.step_in_epoch}, "
                  f"best top1 {trainer.state.best_top1:.2f}", flush=True)
    _announce(cfg, info, spec, lr, warmup, run_dir, trainer.steps_per_epoch)
    tb.text("config", "\n".join(f"    {k}: {v}" for k, v in cfg.to_dict().items()))
    tb.hparams({**cfg.to_dict(), "world_size": info.world_size}, {"hparam/best_top1": 0.0})
    # set-up is over (rendezvous, staging, scan, resume): from here on a stuck collective ends the run soon
    distributed.set_collective_timeout(cfg.collective_timeout)
    try:
        record.update(status="running")
        return trainer.evaluate() if cfg.evaluate else trainer.fit()
    except BaseException as e:
        record.update(status="failed", error=f"{type(e).__name__}: {one_line(e)}")
        raise
    finally:
        tb.close()
