"""Write a small, learnable ImageFolder of real JPEG files (the built-in demo and test dataset).

Each class has its own hue and stripe orientation, drawn with random offsets, noise and
brightness, so a ResNet learns it in a few CPU epochs while the pipeline still decodes, crops
and flips real JPEGs exactly as it would ImageNet's.

    python -m hpc_imagenet.imagenet.data.demo DIR --classes 10 --train-per-class 64 --val-per-class 20
"""
from __future__ import annotations

import argparse
import colorsys
import math
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def _class_image(rng: np.random.Generator, cls: int, classes: int, size: tuple) -> Image.Image:
    width, height = size
    hue = cls / classes
    angle = math.pi * ((cls * 3) % classes) / classes  # orientation differs from the hue order
    period = 6 + 3 * (cls % 3)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * math.pi)
    stripes = 0.5 + 0.5 * np.sin((x * math.cos(angle) + y * math.sin(angle)) * 2 * math.pi / period + phase)
    base = np.array(colorsys.hsv_to_rgb(hue, 0.85, 1.0), dtype=np.float32)
    brightness = rng.uniform(0.6, 1.0)
    img = base[None, None, :] * (0.35 + 0.65 * stripes[..., None]) * brightness
    img += rng.normal(0, 0.06, img.shape).astype(np.float32)
    return Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8))


def write_split(root: Path, split: str, classes: int, per_class: int, seed: int, size: tuple) -> int:
    rng = np.random.default_rng(seed)
    for cls in range(classes):
        folder = root / split / f"class_{cls:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            _class_image(rng, cls, classes, size).save(folder / f"{split}_{cls:03d}_{i:05d}.JPEG", quality=90)
    return classes * per_class


def generate(root, classes: int = 10, train_per_class: int = 64, val_per_class: int = 20,
             size: tuple = (80, 64), seed: int = 0) -> Path:
    """Write DIR/train and DIR/val; returns the root. Existing files of the same name are replaced."""
    root = Path(root)
    write_split(root, "train", classes, train_per_class, seed, size)
    write_split(root, "val", classes, val_per_class, seed + 1, size)
    return root


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", help="where to write train/ and val/")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=64)
    p.add_argument("--val-per-class", type=int, default=20)
    p.add_argument("--width", type=int, default=80)
    p.add_argument("--height", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.classes < 2 or a.train_per_class < 1 or a.val_per_class < 1 or min(a.width, a.height) < 8:
        p.error("need --classes >= 2, at least 1 image per class and split, and images of 8x8 or more")
    generate(a.dir, a.classes, a.train_per_class, a.val_per_class, (a.width, a.height), a.seed)
    total = a.classes * (a.train_per_class + a.val_per_class)
    print(f"wrote {total} JPEGs ({a.classes} classes) to {a.dir}/train and {a.dir}/val", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from hpc_imagenet.imagenet.data.demo import main  # under its one name, not a copy
    sys.exit(main())
