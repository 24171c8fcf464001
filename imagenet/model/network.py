"""Model construction: torchvision models by name, pretrained weights, memory format, SyncBN.

``--pretrained`` downloads torchvision's weights once into the torch hub cache; without network
it fails at once with a message saying where to put the file, instead of hanging.
"""
from __future__ import annotations

import logging
import socket
from typing import List

import torch
import torchvision

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 30


class ModelError(RuntimeError):
    """The model cannot be built as asked; the message says what to change."""


def available() -> List[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _pretrained_weights(arch: str):
    try:
        return torchvision.models.get_model_weights(arch).DEFAULT
    except (ValueError, AttributeError):
        raise ModelError(f"torchvision has no pretrained weights for {arch}; drop --pretrained") from None


def _load_pretrained(arch: str, num_classes: int) -> torch.nn.Module:
    weights = _pretrained_weights(arch)
    classes = len(weights.meta.get("categories", []))
    if num_classes > classes:
        raise ModelError(f"pretrained {arch} predicts {classes} classes but the data has {num_classes}; "
                         "drop --pretrained")
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # urllib would otherwise wait forever
    try:
        return torchvision.models.get_model(arch, weights=weights)
    except (OSError, RuntimeError) as e:  # URLError and timeouts are OSErrors
        cache = torch.hub.get_dir() + "/checkpoints/"
        raise ModelError(f"could not download pretrained weights for {arch} ({str(e).splitlines()[0]}); "
                         f"with no network, copy {weights.url.rsplit('/', 1)[-1]} into {cache} "
                         "or drop --pretrained") from None
    finally:
        socket.setdefaulttimeout(previous)


def build(arch: str, num_classes: int, pretrained: bool = False, zero_init_residual: bool = False) -> torch.nn.Module:
    """torchvision's ARCH; ZERO_INIT_RESIDUAL: each residual block's last BatchNorm starts with zero
    weight, so the block starts as the identity (Goyal et al. 2017; torchvision's own
    ``zero_init_residual`` argument of its ResNets, which we pass on). The settings' validation
    allows it on residual networks only and never with PRETRAINED."""
    if arch not in available():
        near = [m for m in available() if m.startswith(arch[:4])][:8]
        raise ModelError(f"unknown model -a {arch}; torchvision has e.g. {', '.join(near) or 'resnet50'} "
                         "(python -c 'import torchvision; print(torchvision.models.list_models())')")
    if pretrained:
        return _load_pretrained(arch, num_classes)
    extra = {"zero_init_residual": True} if zero_init_residual else {}
    return torchvision.models.get_model(arch, num_classes=num_classes, **extra)


def prepare(model: torch.nn.Module, device: torch.device, channels_last: bool, sync_bn: bool) -> torch.nn.Module:
    """Move to the device in the chosen memory format; SyncBN only makes sense under DDP."""
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model
