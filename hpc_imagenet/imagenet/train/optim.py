"""The optimizer (SGD, Nesterov SGD, RMSprop, AdamW, LARS or LAMB), its parameter groups, and the per-step LR schedule.

The learning rate follows Goyal et al. (2017): ``lr = base_lr * global_batch / 256`` with a linear
warm-up (5 epochs by default when that exceeds the base rate; from the base rate with
``--lr-warmup-from-base``, as theirs), unless ``--lr-scaling none``. The
schedule (:mod:`hpc_imagenet.imagenet.train.schedules`) is evaluated per iteration so warm-up is smooth and a
mid-epoch resume lands on the same value. LARS and LAMB live in :mod:`hpc_imagenet.imagenet.train.layerwise`.
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import nn

from hpc_imagenet.imagenet.train import layerwise, schedules

NORMS = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


def peak_lr(cfg, global_batch: int) -> float:
    return cfg.lr * global_batch / 256 if cfg.lr_scaling == "linear" else cfg.lr


def warmup_epochs(cfg, lr: float) -> float:
    if cfg.lr_schedule == "ramp":
        return 0.0  # the ramp rises from its own start to its peak epoch
    if cfg.warmup_epochs is not None:
        return cfg.warmup_epochs
    return 5.0 if lr > cfg.lr else 0.0


def param_groups(model: nn.Module, weight_decay: float, no_bn_wd: bool, norm_weight_decay: Optional[float] = None,
                 adapt_weights_only: bool = False, bias_weight_decay: Optional[float] = None) -> List[dict]:
    """Parameter groups: weights; normalisation layers (``--norm-weight-decay``, else 0 with
    ``--no-bn-wd``, else ``--wd``); biases (``--bias-weight-decay``, else 0 with ``--no-bn-wd``, else
    ``--wd``). ``adapt`` (LARS and LAMB's
    trust ratio) is False for norms and biases when ADAPT_WEIGHTS_ONLY, as MLPerf's skip list.
    Kinds with the same settings share a group: plain SGD keeps the one group it always had."""
    kinds = {"weight": (weight_decay, True),
             "norm": (0.0 if no_bn_wd and norm_weight_decay is None else
                      weight_decay if norm_weight_decay is None else norm_weight_decay, not adapt_weights_only),
             "bias": (bias_weight_decay if bias_weight_decay is not None else 0.0 if no_bn_wd else weight_decay,
                      not adapt_weights_only)}
    groups: dict = {}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            kind = "norm" if isinstance(module, NORMS) else "bias" if name == "bias" else "weight"
            groups.setdefault(kinds[kind], []).append(p)
    return [{"params": params, "weight_decay": decay, "adapt": adapt} for (decay, adapt), params in groups.items()]


def fused_supported(params: List[torch.Tensor]) -> bool:
    """Whether torch has fused SGD kernels for these parameters' devices and dtypes."""
    from torch.optim import optimizer as torch_optimizer  # a submodule, not an attribute of torch.optim

    supported = getattr(torch_optimizer, "_get_fused_kernels_supported_devices", lambda: ["cuda"])()
    return all(p.device.type in supported and p.is_floating_point() for p in params)


def impl_kwargs(impl: str, params: List[torch.Tensor]) -> dict:
    """SGD's ``fused``/``foreach`` arguments for --optimizer-impl (auto: fused where supported)."""
    if impl == "auto":
        # Fused where it exists (on CPU too: 2x faster than the loop for resnet18); otherwise torch's
        # own choice, because foreach is slower than the plain loop on CPU. CPU's fused kernel is
        # 2.7x slower on channels-last weights than on contiguous ones, slower than the loop.
        cpu_strided = any(p.device.type == "cpu" and not p.is_contiguous() for p in params)
        impl = "fused" if fused_supported(params) and not cpu_strided else "default"
    if impl == "default":
        return {}
    if impl == "fused" and not fused_supported(params):
        from hpc_imagenet.imagenet.config import ConfigError

        device = params[0].device.type if params else "?"
        raise ConfigError(f"--optimizer-impl fused: torch {torch.__version__} has no fused SGD for {device} "
                          "parameters; use --optimizer-impl foreach")
    return {"fused": True, "foreach": None} if impl == "fused" else {"fused": None, "foreach": True}


def build_optimizer(model: nn.Module, cfg, lr: float) -> torch.optim.Optimizer:
    """--opt's optimizer (CFG: the optimisation settings) at peak LR."""
    layerwise_opt = cfg.opt in ("lars", "lamb")
    groups = param_groups(model, cfg.weight_decay, cfg.no_bn_wd, cfg.norm_weight_decay, layerwise_opt,
                          cfg.bias_weight_decay)
    if cfg.opt == "rmsprop":  # torchvision's train.py: TensorFlow's epsilon and decay
        return torch.optim.RMSprop(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, eps=0.0316,
                                   alpha=0.9)
    if cfg.opt == "adamw":
        return torch.optim.AdamW(groups, lr=lr, weight_decay=cfg.weight_decay)
    if cfg.opt == "lars":
        return layerwise.Lars(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                              coefficient=cfg.lars_coefficient)
    if cfg.opt == "lamb":
        return layerwise.Lamb(groups, lr=lr, weight_decay=cfg.weight_decay, max_grad_norm=cfg.lamb_max_grad_norm)
    impl = impl_kwargs(getattr(cfg, "optimizer_impl", "default"), [p for g in groups for p in g["params"]])
    optimizer = torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, nesterov=cfg.opt == "sgd_nesterov", **impl)
    if impl:
        # load_state_dict adopts the checkpoint's group settings, fused/foreach included; the flag wins.
        optimizer.register_load_state_dict_post_hook(lambda opt: [g.update(impl) for g in opt.param_groups])
    return optimizer


def warmup_start(cfg, lr: float) -> Optional[float]:
    """The warm-up's start as a factor of the peak LR: timm's absolute --warmup-lr, Goyal et al.'s from --lr
    (the rate for 256 images) with --lr-warmup-from-base, else --lr-warmup-decay (None: from (step + 1) /
    warm-up steps)."""
    if cfg.warmup_lr is not None and lr > 0:
        return cfg.warmup_lr / lr  # above 1 when the peak is below it: timm's warm-up then falls to the peak
    if cfg.lr_warmup_from_base and lr > 0:
        return min(cfg.lr / lr, 1.0)
    return cfg.lr_warmup_decay


def schedule(cfg, warmup: float, lr: float) -> schedules.Schedule:
    """The run's schedule (CFG: the optimisation settings; WARMUP: epochs; LR: the peak, for --lr-end)."""
    return schedules.Schedule(cfg.lr_schedule, epochs=cfg.epochs, warmup_epochs=warmup,
                              warmup_start=warmup_start(cfg, lr), milestones=tuple(cfg.lr_steps),
                              power=cfg.lr_power, end_factor=cfg.lr_end / lr if lr > 0 else 0.0,
                              peak_epoch=cfg.lr_peak_epoch, gamma=cfg.lr_gamma,
                              warmup_method=cfg.lr_warmup_method,
                              cosine_end=min(cfg.lr_min / lr, 1.0) if lr > 0 else 0.0,
                              per_epoch=cfg.lr_per_epoch, cosine_from_start=cfg.cosine_from_start)


def lr_factor(iteration: int, steps_per_epoch: int, cfg, warmup: float, lr: float = 1.0) -> float:
    """Multiplier of the peak lr at ITERATION (0-based, counted over the whole run)."""
    return schedules.lr_factor(iteration, steps_per_epoch, schedule(cfg, warmup, lr))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg, steps_per_epoch: int, warmup: float, lr: float = 1.0):
    """A per-iteration LambdaLR; its state_dict holds only the iteration count."""
    plan = schedule(cfg, warmup, lr)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda it: schedules.lr_factor(it, steps_per_epoch, plan))
