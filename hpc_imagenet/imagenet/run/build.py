"""Build one run from the settings and a DistInfo (model, precision, wrapper, data, logs), then run it.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from hpc_imagenet.imagenet.common import files, startup
from hpc_imagenet.imagenet.model import ema, network, precision
from hpc_imagenet.imagenet.process import group, preemption
from hpc_imagenet.imagenet.run import distributed, sysinfo
from hpc_imagenet.imagenet.train import checkpoint, losses, mixing, optim, tblog
from hpc_imagenet.imagenet.data import decode, loader, staging
from hpc_imagenet.imagenet.data.resolution import ResolutionRamp
from hpc_imagenet.imagenet.data.normalize import DeviceNormalizer
from hpc_imagenet.imagenet.common.errors import one_line
from hpc_imagenet.imagenet.common.terminal import NullConsole
from hpc_imagenet.imagenet.config import Settings
from hpc_imagenet.imagenet.train.trainer import Parts, Trainer, steps_per_epoch
from hpc_imagenet.imagenet.train.runrecord import RunRecord

log = logging.getLogger(__name__)


def _seed_everything(seed, deterministic: bool) -> None:
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick the fastest kernels


def _run_dir(cfg, info, spec) -> Path:
    if cfg.logging.log_dir:
        return Path(cfg.logging.log_dir)
    name = (f"{datetime.datetime.now():%Y%m%d-%H%M%S}_{socket.gethostname()}_{cfg.model.arch}_gpux{info.world_size}"
            f"_b{cfg.batch.per_process}_{spec.label}")
    return Path(group.broadcast_object(str(Path("runs") / name)))  # every rank: rank 0's name


def _use_sync_bn(cfg, info) -> bool:
    """CFG: the model section."""
    if cfg.sync_bn and info.distributed and info.device.type != "cuda":
        if info.is_primary:  # torch's SyncBatchNorm runs on GPU modules only
            log.warning("--sync-bn needs CUDA GPUs: on CPU each rank keeps its own BatchNorm statistics")
        return False
    return cfg.sync_bn and info.distributed


def _wrap(model: torch.nn.Module, cfg, info) -> torch.nn.Module:
    if cfg.run.variant == "dp":
        if info.device.type != "cuda":
            log.warning("DataParallel: no CUDA GPU here, running on the CPU as a single device")
            return model
        return torch.nn.DataParallel(model)
    if info.distributed:
        return _ddp(model, cfg.dist, info)
    return model


def _ddp(model: torch.nn.Module, cfg, info) -> torch.nn.parallel.DistributedDataParallel:
    """DDP with the --ddp-* flags (CFG: the dist section); gradients are views into the all-reduce
    buckets (no extra copy)."""
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
    # a training checkpoint, a {"state_dict": ...} file, or a plain state dict (hpc_imagenet.imagenet.export's .pth)
    weights = ckpt.get("model", ckpt.get("state_dict", ckpt))
    state = {k.removeprefix("module."): v for k, v in weights.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise checkpoint.CheckpointError(f"{path} does not fit this model ({str(e).splitlines()[0]}); "
                                         "check -a and the number of classes") from None


def _environment(info) -> dict:
    # Only rank 0 writes run.json; sparing the others the git calls matters at a thousand ranks.
    return sysinfo.collect(nodes=info.nodes) if info.is_primary else {}


def _announce(built: Built, console: NullConsole) -> None:
    cfg, info, spec, run_dir = built.cfg, built.info, built.parts.precision.spec, built.parts.run_dir
    console.say(f"=> {cfg.run.variant} variant, {cfg.model.arch}, {info.world_size} process(es) on "
                f"{info.device.type} [{info.environment}{', ' + info.backend if info.backend else ''}], precision "
                f"{spec.label} ({spec.backend})")
    console.say(f"=> batch {cfg.batch.per_process} per process, global batch {cfg.batch.global_batch}; lr "
                f"{built.lr:.4g} (base {cfg.optim.lr:g} per 256, {cfg.optim.lr_scaling} scaling), recipe "
                f"{cfg.run.recipe}, warm-up {built.warmup_epochs:g} epochs; {built.steps_per_epoch} steps/epoch")
    console.say(f"=> run folder {run_dir} (TensorBoard: tensorboard --logdir {run_dir})")


def _compiled(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """torch.compile (CFG: the perf section) for the training steps (evaluation runs the eager model:
    it compiles a second graph for eval-mode BatchNorm otherwise, for a few validation steps)."""
    return torch.compile(model, mode=None if cfg.compile_mode == "default" else cfg.compile_mode)


def _weight_average(model: torch.nn.Module, cfg, warmup_steps: float):
    """--model-ema's average of MODEL's (possibly resumed) weights, or None."""
    if not cfg.model.model_ema:
        return None
    decay = ema.adjusted_decay(cfg.model.model_ema_decay, cfg.batch.global_batch, cfg.model.model_ema_steps,
                               cfg.optim.epochs)
    return ema.WeightAverage(model, decay, cfg.model.model_ema_steps, warmup_steps)


def _resolution(data):
    """The progressive-resizing ramp (DATA: the data section), or None (--image-size throughout)."""
    if data.min_res is None:
        return None
    return ResolutionRamp(data.min_res, data.max_res, data.start_ramp, data.end_ramp)


def _data(cfg: Settings, info: group.DistInfo) -> tuple:
    """(the dataset folder read, (train loader, val loader, classes)). Collectives: rank 0 scans the
    dataset and broadcasts it (the group exists: processes._run inits it first); with --stage-dir every
    node reads its own copy of DATA (staging waits for every node's copier)."""
    root = staging.stage_data(cfg.data, info)
    data_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, root=root))
    return root, loader.build_loaders(data_cfg, info.rank, info.world_size, info.device)


def _model(cfg, info: group.DistInfo, num_classes: int, channels_last: bool) -> torch.nn.Module:
    """The network on the device (CFG: the model section)."""
    model = network.build(cfg.arch, num_classes, cfg.pretrained, cfg.zero_init_residual, cfg.weights,
                          cfg.drop_path_rate)
    return network.prepare(model, info.device, channels_last, _use_sync_bn(cfg, info))


@dataclass
class Built:
    """One run, built: the loop's parts and what starting the loop needs besides."""
    cfg: Settings                   # validated, its batch resolved for this launch
    info: group.DistInfo
    parts: Parts
    lr: float                       # the peak learning rate, scaled to the global batch
    warmup_epochs: float
    steps_per_epoch: int            # optimizer steps
    resumed_from: Optional[Path] = None
    checkpoint: Optional[dict] = None  # its weights are in the model already; run() loads the rest


def build(cfg: Settings, info: group.DistInfo) -> Built:
    """The run's parts, in the order the module docstring gives; collectives: every rank calls it."""
    _seed_everything(cfg.run.seed, cfg.perf.deterministic)
    spec = precision.resolve(cfg.precision, info.device, cfg.batch.accum_steps > 1)
    data_root, (train_loader, val_loader, num_classes) = _data(cfg, info)
    startup.mark("data: staging, the dataset scan, the loaders")
    run_dir = _run_dir(cfg, info, spec)
    channels_last = cfg.perf.use_channels_last(info.device.type)
    model = _model(cfg.model, info, num_classes, channels_last)
    startup.mark("model built and moved to the device")
    lr = optim.peak_lr(cfg.optim, cfg.batch.global_batch)
    warmup = optim.warmup_epochs(cfg.optim, lr)
    optimizer = optim.build_optimizer(model, cfg.optim, lr)
    prec = precision.build(spec, info.device, cfg.optim.clip_grad_norm)
    model, optimizer = prec.setup(model, optimizer)
    steps = steps_per_epoch(len(train_loader), cfg)
    scheduler = optim.build_scheduler(optimizer, cfg.optim, steps, warmup, lr)
    resume, ckpt = checkpoint.load_for_resume(cfg.checkpoint.resume, run_dir)
    if ckpt is not None:
        _load_model_weights(model, ckpt, resume, cfg.model.arch)
    wrapped = _wrap(model, cfg, info)
    if info.is_primary:
        files.make_dirs(run_dir)  # never world-writable, whatever the umask
    parts = Parts(model=_compiled(wrapped, cfg.perf) if cfg.perf.use_compile else wrapped, raw_model=model,
                  eval_model=wrapped if isinstance(wrapped, torch.nn.DataParallel) else model,
                  optimizer=optimizer, scheduler=scheduler, precision=prec,
                  criterion=losses.build(cfg.optim).to(info.device),
                  train_loader=train_loader, val_loader=val_loader,
                  normalizer=DeviceNormalizer(info.device, channels_last),
                  record=_record(cfg, info, spec, run_dir, data_root, lr),
                  tb=tblog.make(info.is_primary, str(run_dir)), run_dir=run_dir,
                  ema=_weight_average(model, cfg, warmup * steps),
                  mix=mixing.build(cfg.data.mixup_alpha, cfg.data.cutmix_alpha, num_classes),
                  resolution=_resolution(cfg.data))
    startup.mark("optimizer, precision, resume, parallel wrapper, run.json")
    return Built(cfg, info, parts, lr, warmup, steps, resume, ckpt)


def _record(cfg: Settings, info: group.DistInfo, spec: precision.PrecisionSpec, run_dir: Path, data_root: str,
            lr: float) -> RunRecord:
    """run.json as the run starts (rank 0 writes it)."""
    return RunRecord(run_dir, info.is_primary, config=cfg.to_dict(), data_root=data_root,
                     dist={"world_size": info.world_size, "backend": info.backend, "environment": info.environment,
                           "device": info.device.type, "nodes": info.nodes, "local_world_size": info.local_world_size},
                     environment=_environment(info), data_decoder=decode.decoder_in_use(cfg.data.data_backend),
                     global_batch=cfg.batch.global_batch, lr=lr,
                     precision={"label": spec.label, "backend": spec.backend, "level": spec.level,
                                "requested": spec.requested or spec.label})


def run(built: Built) -> int:
    """Train (or --evaluate) what :func:`build` made; returns the process exit code."""
    cfg, info, parts = built.cfg, built.info, built.parts
    trainer = Trainer(cfg, info, parts, preemption.for_run())
    if built.checkpoint is not None and not cfg.run.evaluate:
        trainer.load_state_dict(built.checkpoint)
        trainer.console.say(f"=> resumed from {built.resumed_from}: epoch {trainer.state.epoch}, step "
                            f"{trainer.state.step_in_epoch}, best top1 {trainer.state.best_top1:.2f}")
    _announce(built, trainer.console)
    parts.tb.text("config", "\n".join(f"    {k}: {v}" for k, v in cfg.flat().items()))
    parts.tb.hparams({**cfg.flat(), "world_size": info.world_size}, {"hparam/best_top1": 0.0})
    # set-up is over (rendezvous, staging, scan, resume): from here on a stuck collective ends the run soon
    distributed.set_collective_timeout(cfg.dist.collective_timeout)
    startup.mark("trainer, resumed state, TensorBoard's first writes")
    try:
        parts.record.update(status="running")
        code = trainer.evaluate() if cfg.run.evaluate else trainer.fit()
        staging.release_data(cfg.data, info, finished=code == 0)  # --stage-cleanup: a stopped run keeps the copy
        return code
    except BaseException as e:
        parts.record.update(status="failed", error=f"{type(e).__name__}: {one_line(e)}")
        raise
    finally:
        parts.tb.close()
