"""Named, cited training recipes: published settings as data, selected with ``--recipe NAME``.

A recipe is a function of the global batch returning ``{setting name: value}``, where a setting
name is a field of one of the sections in :mod:`imagenet.config.sections`. The command line is
applied on top: a flag given explicitly wins over the recipe, the recipe wins over the defaults.
Adding a recipe is one entry in :data:`RECIPES`; a recipe that needs a new setting names it in its
values once the setting exists in its section (a unit test checks that every name does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional


@dataclass(frozen=True)
class Recipe:
    """A published recipe: where it comes from, what it reached, and the settings it uses."""
    name: str
    source: str  # the paper or file the values come from
    top1: Optional[float]  # published ImageNet top-1 (%) of ResNet-50 with this recipe
    epochs: int  # the epochs that top-1 took
    published_batch: int  # the global batch of the published run
    values: Callable[[int], Dict[str, Any]]  # global batch -> {setting name: value}
    note: str = ""  # what differs from the source, and why


def _examples(global_batch: int) -> Dict[str, Any]:
    return {}  # the settings' defaults are this recipe


def _goyal(global_batch: int) -> Dict[str, Any]:
    # 0.1 per 256 images scaled linearly (lr_scaling), so the global batch needs no term here.
    return {"lr": 0.1, "lr_scaling": "linear", "warmup_epochs": 5.0, "epochs": 90, "lr_schedule": "step",
            "lr_steps": (30, 60, 80), "momentum": 0.9, "weight_decay": 1e-4, "no_bn_wd": True}


RECIPES: Dict[str, Recipe] = {recipe.name: recipe for recipe in (
    Recipe("examples", "pytorch/examples imagenet/main.py (SGD 0.1 per 256, momentum 0.9, wd 1e-4, x0.1 at "
           "epochs 30/60/80); torchvision's ResNet50_Weights.IMAGENET1K_V1 were trained this way",
           top1=76.13, epochs=90, published_batch=256, values=_examples,
           note="this project's defaults, unchanged; the warm-up (5 epochs when the scaled lr exceeds the "
                "base lr) is this project's addition"),
    Recipe("goyal", "Goyal et al. 2017, Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour "
           "(arXiv 1706.02677), sections 2-5 and table 1", top1=76.3, epochs=90, published_batch=8192,
           values=_goyal,
           note="linear scaling, 5-epoch gradual warm-up, no weight decay on BN (--no-bn-wd also spares "
                "biases); the zero-initialised last BN of each residual block comes with the recipe "
                "components"),
)}


def names() -> list:
    return sorted(RECIPES)
