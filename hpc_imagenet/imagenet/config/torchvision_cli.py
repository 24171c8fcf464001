"""torchvision's reference command line (``references/classification/train.py``), accepted as written.

Most of its flags are the engine's own under the same name (the sections list those spellings
beside the engine's). What this module adds:

- the spellings that are not one setting's flag: ``--data-path DIR`` (the dataset root, positional
  here) and ``--amp`` (``--opt-level O1``);
- the flags that have no meaning here, refused with one line saying why;
- torchvision's reading of the learning rate. Its ``--lr`` is the rate of the whole global batch
  (0.5 for 8 x 128 images in the ResNet-50 recipe) and its warm-up starts at ``--lr-warmup-decay``
  0.01 of it; the engine's defaults scale ``--lr`` to the global batch and warm up from 0. A command
  line that uses a spelling only torchvision has (:data:`DIALECT_FLAGS`, or a schedule named as
  torchvision names it) gets torchvision's defaults for those two, under any recipe and flag.

One difference stays by default: torchvision steps its schedule once per epoch, the engine per step
(smooth warm-up and decay, an exact mid-epoch resume); the two agree at every epoch boundary, and
``--lr-per-epoch`` holds each epoch at its boundary's value as torchvision does.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Iterable, Mapping

from hpc_imagenet.imagenet.config.choices import LR_SCHEDULE_ALIASES
from hpc_imagenet.imagenet.config.errors import ConfigError

# torchvision's flags that have no meaning here: the flag -> why, and what to do instead.
REFUSED = {
    "--cache-dataset": "the engine indexes a dataset in seconds once per run and never re-reads it; drop it",
    "--device": "the engine trains on the GPUs the launcher gives each process (else the CPU); drop it",
    "--backend": "pick the decoding pipeline with --data-backend (fast, pil, device, dali)",
    "--use-v2": "the engine's per-image transforms are torchvision's v2 already; drop it",
    "--transformer-embedding-decay": "it sets the decay of vision transformers' embeddings, which ResNets do "
                                     "not have; drop it",
}
# Spellings only torchvision's train.py uses: one of them makes a command line torchvision's.
DIALECT_FLAGS = ("--model", "--data-path", "--output-dir", "--amp", "--test-only", "--use-deterministic-algorithms",
                 "--lr-warmup-method", "--lr-step-size", "--lr-min", "--weights")
DIALECT_DEFAULTS = {"lr_scaling": "none", "lr_warmup_decay": 0.01}


class _Refuse(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs: Any):
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS,
                         help=f"torchvision's; refused here: {REFUSED[option_strings[0]]}")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise ConfigError(f"{option_string} is torchvision's and has no meaning here: {REFUSED[option_string]}")


def add_to(parser: argparse.ArgumentParser) -> None:
    """The spellings that are no single setting's flag, and the refused flags."""
    parser.add_argument("--data-path", dest="root", default=argparse.SUPPRESS, metavar="DIR",
                        help="torchvision's spelling of the dataset root DIR")
    parser.add_argument("--amp", dest="opt_level", action="store_const", const="O1", default=argparse.SUPPRESS,
                        help="torchvision's mixed precision: --opt-level O1")
    for flag in REFUSED:
        parser.add_argument(flag, action=_Refuse)


def is_torchvision(argv: Iterable[str]) -> bool:
    """Whether a command line uses a spelling only torchvision's train.py has."""
    words = [arg.split("=", 1)[0] for arg in argv]
    return any(w in DIALECT_FLAGS for w in words) or any(w in LR_SCHEDULE_ALIASES for w in argv)


def normalised(values: Mapping[str, Any]) -> Dict[str, Any]:
    """torchvision's value names as the engine's: the schedules, and ``--dist-url env://`` (its default:
    the launcher's environment, which the engine reads without a URL)."""
    out = dict(values)
    if out.get("lr_schedule") in LR_SCHEDULE_ALIASES:
        out["lr_schedule"] = LR_SCHEDULE_ALIASES[out["lr_schedule"]]
    if out.get("dist_url") == "env://":
        out["dist_url"] = None
    return out


def step_milestones(values: Dict[str, Any], given: Mapping[str, Any]) -> None:
    """--lr-step-size N -> --lr-steps N, 2N, ... below --epochs (torchvision's StepLR), in VALUES."""
    size = values.get("lr_step_size")
    if size is None:
        return
    if "lr_steps" in given:
        raise ConfigError("--lr-step-size and --lr-steps both place the step schedule's drops: give one")
    if size < 1:
        raise ConfigError(f"--lr-step-size must be at least 1 epoch (got {size})")
    values["lr_steps"] = tuple(range(size, values["epochs"], size))
