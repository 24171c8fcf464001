"""A download in ImageNet's official layout, built from an ImageFolder whose classes are WNIDs.

Writes what image-net.org ships for ILSVRC 2012, at any size: ``ILSVRC2012_img_train.tar`` (a tar of
per-class tars), ``ILSVRC2012_img_val.tar`` (flat ``ILSVRC2012_val_NNNNNNNN.JPEG``, numbered in a
shuffled order) and the labels, as the devkit (``meta.mat`` written with ``scipy.io.savemat``: the
``synsets`` struct with ILSVRC2012_IDs in a shuffled, not WNID, order plus WordNet inner nodes) or as
Kaggle's ``LOC_synset_mapping.txt`` + ``LOC_val_solution.csv``. Members are added in shuffled order,
so a reader must sort them as an ImageFolder does. For the importer's tests and its benchmark.
"""
from __future__ import annotations

import io
import os
import random
import tarfile
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from hpc_imagenet.imagenet.data import archives

SYNSET_FIELDS = ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
                 "num_train_images")
INNER_NODES = 3  # WordNet nodes above the classes, as meta.mat lists them after the 1,000 leaves


def _classes(folder: Path, split: str) -> List[str]:
    return sorted(p.name for p in (folder / split).iterdir() if p.is_dir())


def class_name(wnid: str) -> str:
    return f"thing {wnid}, object {wnid}"


def _add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(payload), 0o644
    tar.addfile(info, io.BytesIO(payload))


def write_train(folder: Path, out: Path, rng: random.Random) -> int:
    """The tar of per-class tars; returns the number of images."""
    count, classes = 0, _classes(folder, "train")
    rng.shuffle(classes)
    with tarfile.open(out / archives.TRAIN_TAR, "w", format=tarfile.GNU_FORMAT) as outer:
        for wnid in classes:
            files = sorted((folder / "train" / wnid).iterdir())
            rng.shuffle(files)
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for f in files:
                    _add(tar, f.name, f.read_bytes())
            _add(outer, f"{wnid}.tar", inner.getvalue())
            count += len(files)
    return count


def write_val(folder: Path, out: Path, rng: random.Random) -> Dict[str, str]:
    """The flat validation tar; returns {ILSVRC2012_val_N file name: WNID}."""
    images = [(wnid, f) for wnid in _classes(folder, "val") for f in sorted((folder / "val" / wnid).iterdir())]
    rng.shuffle(images)  # validation numbers do not follow the classes
    labels = {f"ILSVRC2012_val_{n:08d}.JPEG": wnid for n, (wnid, _) in enumerate(images, 1)}
    order = list(zip(labels, images))
    rng.shuffle(order)
    with tarfile.open(out / archives.VAL_TAR, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, (_, f) in order:
            _add(tar, name, f.read_bytes())
    return labels


def write_devkit(out: Path, classes: Sequence[str], labels: Dict[str, str], rng: random.Random) -> None:
    """The devkit tar.gz: meta.mat (shuffled IDs, inner nodes) and the validation ground truth."""
    import scipy.io

    order = list(classes)
    rng.shuffle(order)  # ILSVRC2012_ID 1 is not the first WNID
    ids = {wnid: i for i, wnid in enumerate(order, 1)}
    rows = [(ids[w], w, class_name(w), "a class", 0, np.zeros((1, 0)), 0, 1300) for w in order]
    rows += [(len(order) + k, f"n9{k:07d}", f"inner node {k}", "not a class", 2, np.array([[1, 2]]), 1, 0)
             for k in range(1, INNER_NODES + 1)]
    synsets = np.empty((len(rows), 1), dtype=[(f, "O") for f in SYNSET_FIELDS])
    for i, row in enumerate(rows):
        synsets[i, 0] = row  # a tuple fills the struct's fields in order
    meta = io.BytesIO()
    scipy.io.savemat(meta, {"synsets": synsets})
    truth = "".join(f"{ids[labels[name]]}\n" for name in sorted(labels))
    with tarfile.open(out / archives.DEVKIT, "w:gz") as tar:
        _add(tar, f"ILSVRC2012_devkit_t12/{archives.META}", meta.getvalue())
        _add(tar, f"ILSVRC2012_devkit_t12/{archives.GROUND_TRUTH}", truth.encode())


def write_kaggle(out: Path, classes: Sequence[str], labels: Dict[str, str], rng: random.Random) -> None:
    (out / archives.KAGGLE_MAPPING).write_text("".join(f"{w} {class_name(w)}\n" for w in sorted(classes)))
    rows = [f"{name[:-5]},{wnid} 10 20 30 40 {wnid} 5 6 7 8\n" for name, wnid in labels.items()]
    rng.shuffle(rows)
    (out / archives.KAGGLE_VAL).write_text("ImageId,PredictionString\n" + "".join(rows))


def write_download(folder: Path, out: Path, labels: str = "devkit", seed: int = 0) -> Dict[str, str]:
    """Write the download for FOLDER (train/<wnid>/, val/<wnid>/) into OUT; LABELS is devkit or
    kaggle. Returns {validation file name in the archive: WNID}."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    write_train(Path(folder), out, rng)
    val = write_val(Path(folder), out, rng)
    writer = write_devkit if labels == "devkit" else write_kaggle
    writer(out, _classes(Path(folder), "train"), val, rng)
    return val


def download_bytes(out: Path) -> int:
    return sum(os.path.getsize(out / name) for name in (archives.TRAIN_TAR, archives.VAL_TAR))
