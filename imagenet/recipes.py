"""Named, cited training recipes: published settings as data, selected with ``--recipe NAME``.

A recipe is a function of the global batch returning ``{setting name: value}``, where a setting
name is a field of one of the sections in :mod:`imagenet.config.sections`. The command line is
applied on top: a flag given explicitly wins over the recipe, the recipe wins over the defaults.
Adding a recipe is one entry in :data:`RECIPES`; a recipe that needs a new setting names it in its
values once the setting exists in its section (a unit test checks that every name does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple


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
            "lr_steps": (30, 60, 80), "momentum": 0.9, "weight_decay": 1e-4, "no_bn_wd": True,
            "zero_init_residual": True}


def mlperf_lr_and_warmup(global_batch: int) -> Tuple[float, float]:
    """MLPerf's PolynomialDecayWithWarmup defaults: (base LR, warm-up epochs) for the global batch."""
    if global_batch < 16384:
        return 10.0, 5.0
    if global_batch < 32768:
        return 25.0, 5.0
    return 31.2, 25.0


def _mlperf(global_batch: int) -> Dict[str, Any]:
    lr, warmup = mlperf_lr_and_warmup(global_batch)
    return {"opt": "lars", "lars_coefficient": 0.001, "lr": lr, "lr_scaling": "none", "warmup_epochs": warmup,
            "lr_warmup_decay": 0.0, "lr_schedule": "poly", "lr_power": 2.0, "lr_end": 1e-4, "epochs": 42,
            "momentum": 0.9, "weight_decay": 2e-4, "label_smoothing": 0.1, "no_bn_wd": True}


FFCV_LR, FFCV_BATCH = 1.7, 4096  # rn50_configs: lr 1.7 for 8 GPUs x 512


def _ffcv(epochs: int, start_ramp: int, end_ramp: int) -> Callable[[int], Dict[str, Any]]:
    def values(global_batch: int) -> Dict[str, Any]:
        return {"lr": FFCV_LR * 256 / FFCV_BATCH, "lr_scaling": "linear", "lr_schedule": "ramp",
                "lr_peak_epoch": 2.0, "epochs": epochs, "momentum": 0.9, "weight_decay": 1e-4,
                "label_smoothing": 0.1, "no_bn_wd": True, "image_size": 160, "min_res": 160, "max_res": 192,
                "start_ramp": start_ramp, "end_ramp": end_ramp, "val_crop_size": 256, "val_resize_size": 293}
    return values


FFCV_SOURCE = ("libffcv/ffcv-imagenet rn50_configs/rn50_{}_epochs.yaml with train_imagenet.py (cyclic LR, "
               "get_resolution) and the README's table (8 x A100)")
FFCV_NOTE = ("no BlurPool and no flip test-time augmentation (FFCV has both); its 256 px validation crops the "
             "central 224/256 of the short side, here resize 293 + crop 256; its LR 1.7 is for a global batch "
             "of 4096 and is scaled linearly here for others; its BN-only no-decay rule is --no-bn-wd here")
FFCV_RUNS = [(16, 11, 13, 73.8), (24, 17, 20, 75.6), (32, 23, 27, 76.6), (40, 29, 34, 77.2), (56, 41, 48, 78.0),
             (88, 65, 76, 78.4)]


RECIPES: Dict[str, Recipe] = {recipe.name: recipe for recipe in (
    Recipe("examples", "pytorch/examples imagenet/main.py (SGD 0.1 per 256, momentum 0.9, wd 1e-4, x0.1 at "
           "epochs 30/60/80); torchvision's ResNet50_Weights.IMAGENET1K_V1 were trained this way",
           top1=76.13, epochs=90, published_batch=256, values=_examples,
           note="this project's defaults, unchanged; the warm-up (5 epochs when the scaled lr exceeds the "
                "base lr) is this project's addition"),
    Recipe("goyal", "Goyal et al. 2017, Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour "
           "(arXiv 1706.02677), sections 2-5 and table 1", top1=76.3, epochs=90, published_batch=8192,
           values=_goyal,
           note="linear scaling, 5-epoch gradual warm-up, zero-initialised last BN of each residual block, no "
                "weight decay on BN (--no-bn-wd also spares biases)"),
    Recipe("mlperf", "MLPerf Training ResNet-50 reference, mlcommons/training "
           "image_classification/tensorflow2/lars_util.py (LR and warm-up by global batch, poly power 2 to "
           "1e-4), lars_optimizer.py (LARS, eeta 0.001), README_tensorflow2.md (TPU v3-64 run: batch 4096, "
           "42 epochs, wd 2e-4, label smoothing 0.1, momentum 0.9)", top1=75.9, epochs=42,
           published_batch=4096, values=_mlperf,
           note="75.9 % is the benchmark's target accuracy, not a mean result; the reference evaluates every 4 "
                "epochs and uses its own (Inception-style) augmentation"),
    *(Recipe(f"ffcv-{epochs}", FFCV_SOURCE.format(epochs), top1=top1, epochs=epochs, published_batch=FFCV_BATCH,
             values=_ffcv(epochs, start, end), note=FFCV_NOTE) for epochs, start, end, top1 in FFCV_RUNS),
)}


def names() -> list:
    return sorted(RECIPES)


def named_in(flags) -> Optional[str]:
    """The recipe a list of training flags asks for (``--recipe NAME`` or ``--recipe=NAME``; the last
    wins, as argparse's), or None: for tools that pass training flags through (batch files, reports)."""
    names = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == "--recipe"]
    names += [flag.split("=", 1)[1] for flag in flags if flag.startswith("--recipe=")]
    return names[-1] if names else None
