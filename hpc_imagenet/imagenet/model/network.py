"""Model construction: torchvision models by name, pretrained weights, stochastic depth, memory format, SyncBN.

``--pretrained`` (the architecture's default weights) and ``--weights NAME`` (torchvision's enum,
e.g. ``ResNet50_Weights.IMAGENET1K_V2``) download torchvision's weights once into the torch hub
cache; without network they fail at once with a message saying where to put the file, instead of
hanging.

``--drop-path-rate`` adds stochastic depth to torchvision's ResNets, which have none: a forward hook
on each block's last BatchNorm (whose output is the residual branch, added to the shortcut right
after) applies torchvision's ``stochastic_depth`` op to it, with timm's rule of a rate rising
linearly from 0 at the first block to the given rate at the last. A hook, not a wrapped module:
the state dict keeps torchvision's names, so checkpoints and published weights load unchanged.
"""
from __future__ import annotations

import functools
import logging
import socket
from typing import List, Optional

import torch
import torchvision
from torchvision.models import resnet
from torchvision.ops import stochastic_depth

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 30


class ModelError(RuntimeError):
    """The model cannot be built as asked; the message says what to change."""


def available() -> List[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _pretrained_weights(arch: str, name: Optional[str] = None):
    """torchvision's weights for ARCH: NAME (``ResNet50_Weights.IMAGENET1K_V2``, or ``IMAGENET1K_V2``
    of ARCH's own enum), else the architecture's default."""
    flag = f"--weights {name}" if name else "--pretrained"
    try:
        if name is None:
            return torchvision.models.get_model_weights(arch).DEFAULT
        weights = torchvision.models.get_weight(name if "." in name else f"{_enum_name(arch)}.{name}")
    except (ValueError, AttributeError, KeyError):
        raise ModelError(f"torchvision has no weights {flag.split(' ', 1)[-1]} for {arch}; see "
                         f"torchvision.models.get_model_weights('{arch}') for the names, or drop {flag}") from None
    if weights not in torchvision.models.get_model_weights(arch):
        raise ModelError(f"{flag} are weights of another model than -a {arch}; give {arch}'s own")
    return weights


def _enum_name(arch: str) -> str:
    return torchvision.models.get_model_weights(arch).__name__


def _load_pretrained(arch: str, num_classes: int, name: Optional[str] = None) -> torch.nn.Module:
    weights = _pretrained_weights(arch, name)
    flag = f"--weights {name}" if name else "--pretrained"
    classes = len(weights.meta.get("categories", []))
    if num_classes > classes:
        raise ModelError(f"pretrained {arch} predicts {classes} classes but the data has {num_classes}; "
                         f"drop {flag}")
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # urllib would otherwise wait forever
    try:
        return torchvision.models.get_model(arch, weights=weights)
    except (OSError, RuntimeError) as e:  # URLError and timeouts are OSErrors
        cache = torch.hub.get_dir() + "/checkpoints/"
        raise ModelError(f"could not download pretrained weights for {arch} ({str(e).splitlines()[0]}); "
                         f"with no network, copy {weights.url.rsplit('/', 1)[-1]} into {cache} "
                         f"or drop {flag}") from None
    finally:
        socket.setdefaulttimeout(previous)


def build(arch: str, num_classes: int, pretrained: bool = False, zero_init_residual: bool = False,
          weights: Optional[str] = None, drop_path_rate: float = 0.0) -> torch.nn.Module:
    """torchvision's ARCH; ZERO_INIT_RESIDUAL: each residual block's last BatchNorm starts with zero
    weight, so the block starts as the identity (Goyal et al. 2017; torchvision's own
    ``zero_init_residual`` argument of its ResNets, which we pass on). The settings' validation
    allows it on residual networks only and never with PRETRAINED."""
    if arch not in available():
        near = [m for m in available() if m.startswith(arch[:4])][:8]
        raise ModelError(f"unknown model -a {arch}; torchvision has e.g. {', '.join(near) or 'resnet50'} "
                         "(python -c 'import torchvision; print(torchvision.models.list_models())')")
    if pretrained or weights:
        model = _load_pretrained(arch, num_classes, weights)
    else:
        extra = {"zero_init_residual": True} if zero_init_residual else {}
        model = torchvision.models.get_model(arch, num_classes=num_classes, **extra)
    if drop_path_rate:
        add_stochastic_depth(model, drop_path_rate)
    return model


def residual_branch_ends(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The last BatchNorm of each residual block of a torchvision ResNet, in order."""
    blocks = [m for m in model.modules() if isinstance(m, (resnet.BasicBlock, resnet.Bottleneck))]
    return [b.bn3 if isinstance(b, resnet.Bottleneck) else b.bn2 for b in blocks]


def add_stochastic_depth(model: torch.nn.Module, rate: float) -> None:
    """Drop each residual branch per sample while training, at RATE x block / (blocks - 1)."""
    ends = residual_branch_ends(model)
    if not ends:
        raise ModelError("--drop-path-rate needs a torchvision ResNet (resnet*, resnext*, wide_resnet*)")
    for block, bn in enumerate(ends):
        block_rate = rate * block / max(len(ends) - 1, 1)
        if block_rate > 0:
            bn.register_forward_hook(functools.partial(_drop_branch, block_rate))


def _drop_branch(rate: float, module: torch.nn.Module, inputs, output: torch.Tensor) -> torch.Tensor:
    return stochastic_depth(output, rate, "row", module.training)


def prepare(model: torch.nn.Module, device: torch.device, channels_last: bool, sync_bn: bool) -> torch.nn.Module:
    """Move to the device in the chosen memory format; SyncBN only makes sense under DDP."""
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model
