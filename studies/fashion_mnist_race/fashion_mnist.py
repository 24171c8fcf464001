"""Fashion-MNIST, as packaged (four IDX files), converted once into the project's own format: an
ImageFolder (``train/`` and ``val/``, one folder per class, named for the class) of RGB JPEGs, the
form a user's own photographs take.

The IDX reader is a few lines of numpy because the format is a fixed header and raw bytes;
torchvision's ``FashionMNIST`` would also parse them but insists on its own folder layout and a
download step. The images keep their 28 x 28 pixels (the loaders resize), turned to RGB because
the models and both training programs expect three channels. The whole folder is written under a
temporary name and renamed when complete, so an interrupted conversion is never mistaken for a
finished one.

Two conversions, one per use (``SPLITS``):
- ``test``, what the counted benchmark runs score on: ``train/`` holds the 60,000 training photographs,
  ``val/`` the 10,000 test photographs that define the target;
- ``tuning``, what every recipe decision is made on: a fixed, class-stratified tenth of the training
  photographs (6,000: 600 a class, drawn with ``TUNING_SEED``) held out as ``val/``, the other 54,000 as
  ``train/``. It is built from the training files alone: the test files are never opened, so no
  tuning run can see the photographs a benchmark scores on.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from hpc_imagenet.imagenet.common.files import write_json
from hpc_imagenet.harness.runners.common import BenchError

SOURCE_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "val": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
# The labels 0-9 in the data set's README, as folder names (ImageFolder orders classes by name,
# so the class index differs from the label number; both programs read the same folders).
CLASS_NAMES = ("t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
               "bag", "ankle_boot")
JPEG_QUALITY = 95
SPLITS = ("test", "tuning")
HELD_OUT = 0.1  # of each class's training photographs: 600 a class, 6,000 in all, as many as the test set has
TUNING_SEED = 0
MISSING_HINT = ("apt-get install dataset-fashion-mnist (Debian/Ubuntu), or download the four "
                "*-ubyte.gz files from https://github.com/zalandoresearch/fashion-mnist (data/fashion) "
                "into one folder and pass it with --fashion-mnist DIR")


def check_source(source: Path, splits: Tuple[str, ...] = tuple(FILES)) -> None:
    """BenchError naming the fix when a packaged file of SPLITS (train, val) is missing."""
    missing = [name for split in splits for name in FILES[split] if not (source / name).is_file()]
    if missing:
        raise BenchError(f"Fashion-MNIST not found in {source} (missing {', '.join(missing)}); {MISSING_HINT}")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip'd): a big-endian header (magic with the dimension count, then each size)
    followed by unsigned bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    if data[:2] != b"\0\0" or data[2] != 0x08 or dims not in (1, 3):
        raise BenchError(f"{path} is not an IDX file of unsigned bytes; {MISSING_HINT}")
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise BenchError(f"{path} is truncated ({body.size} bytes of {int(np.prod(shape))}); {MISSING_HINT}")
    return body.reshape(shape)


def cache_name(train_per_class: Optional[int], val_per_class: Optional[int], split: str = "test") -> str:
    """The folder name of a conversion: the whole set, or a slice of the first N images per class;
    ``-tuning`` for the held-out tuning split."""
    name = "fashion-mnist" + ("-tuning" if split == "tuning" else "")
    if train_per_class is None and val_per_class is None:
        return name
    return f"{name}-{train_per_class or 'all'}x{val_per_class or 'all'}"


def convert(source: Path, cache_dir: Path, train_per_class: Optional[int] = None,
            val_per_class: Optional[int] = None, split: str = "test") -> Path:
    """The ImageFolder of SOURCE's images under CACHE_DIR, written on the first call, reused after.

    SPLIT is what ``val/`` holds: ``test`` (the test photographs) or ``tuning`` (training photographs
    held out; the test files are not read). ``*_per_class`` keep the first N images of each class
    (the tests' and quick checks' slices)."""
    if split not in SPLITS:
        raise BenchError(f"unknown split {split!r}: choose one of {', '.join(SPLITS)}")
    out = cache_dir / cache_name(train_per_class, val_per_class, split)
    if (out / "classes.json").is_file():
        return out
    check_source(source, ("train",) if split == "tuning" else tuple(FILES))
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a conversion that was interrupted
    counts: Dict[str, int] = {}
    for folder, (images, labels, chosen) in _parts(source, split).items():
        counts[folder] = _write_split(partial / folder, images, labels, chosen, dict(train=train_per_class,
                                                                                     val=val_per_class)[folder])
    write_json(partial / "classes.json", {"classes": list(CLASS_NAMES), "images": counts, "val_split": split,
                                          "source": "Fashion-MNIST (Zalando Research), 28x28 grey as RGB JPEG",
                                          **({"held_out": held_out_note()} if split == "tuning" else {})})
    partial.rename(out)
    return out


def held_out_note() -> str:
    return (f"val/ = {HELD_OUT:.0%} of each class's training photographs held out (seed {TUNING_SEED}), "
            "train/ = the rest; the test files are not read")


def _parts(source: Path, split: str) -> Dict[str, Tuple[np.ndarray, np.ndarray, List[np.ndarray]]]:
    """{folder: (images, labels, the indices each class keeps)} of a conversion."""
    images, labels = (read_idx(source / name) for name in FILES["train"])
    if split == "tuning":
        held = held_out(labels)
        kept = [np.setdiff1d(np.flatnonzero(labels == label), held[label]) for label in range(len(CLASS_NAMES))]
        return {"train": (images, labels, kept), "val": (images, labels, held)}
    test_images, test_labels = (read_idx(source / name) for name in FILES["val"])
    return {"train": (images, labels, _by_class(labels)), "val": (test_images, test_labels, _by_class(test_labels))}


def held_out(labels: np.ndarray) -> List[np.ndarray]:
    """Per class, the sorted indices of the training photographs held out for tuning: a fixed draw."""
    rng = np.random.default_rng(TUNING_SEED)
    return [np.sort(rng.permutation(members)[:max(1, round(HELD_OUT * len(members)))])
            for members in _by_class(labels)]


def _by_class(labels: np.ndarray) -> List[np.ndarray]:
    return [np.flatnonzero(labels == label) for label in range(len(CLASS_NAMES))]


def _write_split(folder: Path, images: np.ndarray, labels: np.ndarray, chosen: List[np.ndarray],
                 per_class: Optional[int]) -> int:
    from PIL import Image

    for name in CLASS_NAMES:
        (folder / name).mkdir(parents=True, exist_ok=True)
    written = 0
    for label, indices in enumerate(chosen):
        for index in indices[:per_class]:
            Image.fromarray(images[index]).convert("RGB").save(
                folder / CLASS_NAMES[label] / f"{index:05d}.jpg", quality=JPEG_QUALITY)
            written += 1
    return written


def classes_of(root: Path) -> List[str]:
    return json.loads((root / "classes.json").read_text())["classes"]


def counts_of(root: Path) -> Dict[str, int]:
    """Images per split of a conversion: {"train": N, "val": M}."""
    return json.loads((root / "classes.json").read_text())["images"]


def val_split_of(root: Path) -> str:
    """What a conversion's ``val/`` holds: ``test`` or ``tuning`` (conversions before the tuning split: test)."""
    return json.loads((root / "classes.json").read_text()).get("val_split", "test")
