"""Fashion-MNIST, as packaged (four IDX files), converted once into the project's own format: an
ImageFolder (``train/`` and ``val/``, one folder per class, named for the class) of RGB JPEGs, the
form a user's own photographs take.

The IDX reader is a few lines of numpy because the format is a fixed header and raw bytes;
torchvision's ``FashionMNIST`` would also parse them but insists on its own folder layout and a
download step. The images keep their 28 x 28 pixels (the loaders resize), turned to RGB because
the models and both training programs expect three channels. The whole folder is written under a
temporary name and renamed when complete, so an interrupted conversion is never mistaken for a
finished one.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from imagenet.common.files import write_json
from results.runners.common import BenchError

SOURCE_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "val": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
# The labels 0-9 in the data set's README, as folder names (ImageFolder orders classes by name,
# so the class index differs from the label number; both programs read the same folders).
CLASS_NAMES = ("t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
               "bag", "ankle_boot")
JPEG_QUALITY = 95
MISSING_HINT = ("apt-get install dataset-fashion-mnist (Debian/Ubuntu), or download the four "
                "*-ubyte.gz files from https://github.com/zalandoresearch/fashion-mnist (data/fashion) "
                "into one folder and pass it with --fashion-mnist DIR")


def check_source(source: Path) -> None:
    """BenchError naming the fix when a packaged file is missing."""
    missing = [name for pair in FILES.values() for name in pair if not (source / name).is_file()]
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


def cache_name(train_per_class: Optional[int], val_per_class: Optional[int]) -> str:
    """The folder name of a conversion: the whole set, or a slice of the first N images per class."""
    if train_per_class is None and val_per_class is None:
        return "fashion-mnist"
    return f"fashion-mnist-{train_per_class or 'all'}x{val_per_class or 'all'}"


def convert(source: Path, cache_dir: Path, train_per_class: Optional[int] = None,
            val_per_class: Optional[int] = None) -> Path:
    """The ImageFolder of SOURCE's images under CACHE_DIR, written on the first call, reused after.

    ``*_per_class`` keep the first N images of each class (the tests' and quick checks' slices)."""
    out = cache_dir / cache_name(train_per_class, val_per_class)
    if (out / "classes.json").is_file():
        return out
    check_source(source)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a conversion that was interrupted
    counts: Dict[str, int] = {}
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        images, labels = (read_idx(source / name) for name in FILES[split])
        counts[split] = _write_split(partial / split, images, labels, per_class)
    write_json(partial / "classes.json", {"classes": list(CLASS_NAMES), "images": counts,
                                          "source": "Fashion-MNIST (Zalando Research), 28x28 grey as RGB JPEG"})
    partial.rename(out)
    return out


def _write_split(folder: Path, images: np.ndarray, labels: np.ndarray, per_class: Optional[int]) -> int:
    from PIL import Image

    for name in CLASS_NAMES:
        (folder / name).mkdir(parents=True, exist_ok=True)
    written = 0
    for label, indices in _selection(labels, per_class):
        for index in indices:
            Image.fromarray(images[index]).convert("RGB").save(
                folder / CLASS_NAMES[label] / f"{index:05d}.jpg", quality=JPEG_QUALITY)
            written += 1
    return written


def _selection(labels: np.ndarray, per_class: Optional[int]) -> List[Tuple[int, np.ndarray]]:
    return [(label, np.flatnonzero(labels == label)[:per_class]) for label in range(len(CLASS_NAMES))]


def classes_of(root: Path) -> List[str]:
    return json.loads((root / "classes.json").read_text())["classes"]


def counts_of(root: Path) -> Dict[str, int]:
    """Images per split of a conversion: {"train": N, "val": M}."""
    return json.loads((root / "classes.json").read_text())["images"]
