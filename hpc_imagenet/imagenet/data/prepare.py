"""ImageNet's download -> training data, nothing extracted: ``python -m hpc_imagenet.imagenet.data.prepare ARCHIVES
DST``.

ARCHIVES holds the official files (:mod:`hpc_imagenet.imagenet.data.archives`); DST receives, by default, the shards and
index that ``python -m hpc_imagenet.imagenet.data.shards`` writes from the extracted ImageFolder: the same files, byte
for byte (same samples, order, keys, shard boundaries), so training, staging and ``--verify`` work
unchanged. It is written by that module's writer, which reads each image from its byte range in the
archive instead of from a file. ``--format folder`` writes the ImageFolder instead (``train/<wnid>/``
and ``val/<wnid>/``, what extracting and ``valprep.sh`` give).

- Classes are the sorted WNIDs (ImageFolder's and torchvision's order, so class i means what it
  means to pretrained weights); the shard index also keeps each class's name (``class_names``),
  the ImageFolder gets them in ``DST/classes.txt``.
- Parallel (``--workers``): the per-class tars are indexed, and the shards or class folders written,
  by worker processes reading their own byte ranges of the archives.
- Resumable after a kill: shards as in :mod:`hpc_imagenet.imagenet.data.shards`; a class folder is written under a
  hidden temporary name and renamed when complete; the index (or ``classes.txt``) is written last.
- ImageNet's odd files are kept as they are: one PNG under a ``.JPEG`` name and 22 CMYK JPEGs
  decode at training time in every backend (a worker re-encodes the PNG for the ``device`` backend),
  so the samples stay byte-identical to the download and to what the extracted folder would give.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import archives, shards, sources
from hpc_imagenet.imagenet.data.shards import Member, Options

log = logging.getLogger(__name__)

NAMES_FILE = "classes.txt"
Samples = Dict[str, List[Tuple[Member, int, int]]]  # split -> (image, class, bytes) in ImageFolder order


def scan(found: archives.Archives, workers: int) -> Tuple[List[str], List[str], Samples]:
    """(classes, their names, samples per split) of a download; DataError if anything does not fit."""
    tars = archives.class_tars(found.train)
    classes = [wnid for wnid, _, _ in tars]
    # validation first: it is quick, and labels that do not fit fail before the long part
    labels, names = archives.val_labels(found)
    val = archives.labelled_val(archives.val_images(found.val), labels, classes, found.devkit or found.kaggle[1])
    val.sort(key=lambda sample: sample[1])  # by class, then (stable) by file name: ImageFolder's order
    progress = shards.Progress(len(tars), "class archives indexed")
    train = []
    jobs = [(found.train, wnid, offset, size) for wnid, offset, size in tars]
    for target, members in enumerate(shards.run_jobs(jobs, workers, archives.class_images)):
        progress.update(len(members), classes[target])
        train += [(m, target, m.size) for m in members]
    return classes, [names.get(wnid, "") for wnid in classes], {"train": train,
                                                                "val": [(m, c, m.size) for m, c in val]}


def prepare(folder: str, dst: str, fmt: str = "shards", shard_mb: float = shards.DEFAULT_SHARD_MB,
            workers: int = 1, options: Options = Options(), verify_archives: bool = False) -> dict:
    """Convert the download in FOLDER into DST (shards or an ImageFolder); returns counts."""
    found = archives.find(folder)
    if verify_archives:
        for path in shards.run_jobs(found.checked(), min(workers, 3), archives.check_md5):
            log.info("%s: MD5 matches the published sum", path)
    classes, names, samples = scan(found, workers)
    if fmt == "folder":
        return write_folder(folder, dst, classes, names, samples, workers, options)
    return shards.write_splits(folder, dst, classes, samples, shard_mb, workers, options, names)


# ---------------------------------------------------------------- --format folder

def write_folder(folder: str, dst: str, classes: Sequence[str], names: Sequence[str], samples: Samples,
                 workers: int, options: Options) -> dict:
    """The ImageFolder DST/train/<wnid>/, DST/val/<wnid>/ (one job per class folder), then classes.txt."""
    out = Path(dst)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(str(out / split), classes[target], tuple(m for m, _, _ in group), options)
            for split in sources.SPLITS
            for target, group in itertools.groupby(samples[split], key=lambda s: s[1])]
    digest = hashlib.sha256(json.dumps([[os.path.basename(j[0]), j[1], [m.name for m in j[2]]] for j in jobs]).encode())
    shards.check_plan(out, {"source": os.path.abspath(folder), "format": "folder", "options": asdict(options),
                            "samples": digest.hexdigest()})
    progress, skipped = shards.Progress(len(jobs), "class folders"), []
    for written, label, bad in shards.run_jobs(jobs, workers, write_class_folder):
        progress.update(written, label)
        skipped += bad
    files.write_text(out / NAMES_FILE, "".join(f"{c}\t{n}\n" for c, n in zip(classes, names)))
    return {"classes": len(classes), "skipped": len(skipped),
            **{f"{s}_samples": len(samples[s]) - sum(b.startswith(f"{s}/") for b in skipped) for s in sources.SPLITS}}


def write_class_folder(job: Tuple[str, str, Tuple[Member, ...], Options]) -> Tuple[int, str, List[str]]:
    """Write one class folder (unless it exists): (images written, its name, images skipped)."""
    split_dir, wnid, members, options = job
    final, label = os.path.join(split_dir, wnid), f"{os.path.basename(split_dir)}/{wnid}"
    if os.path.isdir(final):
        return len(members), label, []
    tmp = os.path.join(split_dir, f".{wnid}.tmp")  # hidden: a dataset scan does not take it for a class
    shutil.rmtree(tmp, ignore_errors=True)  # what a killed run left
    os.makedirs(tmp)
    skipped = []
    with shards.SourceReader() as read:
        for member in members:
            try:
                payload, _ = shards.encoded(member, options, read)
            except DataError as e:
                if not options.skip_bad:
                    raise
                log.warning("skipping %s", e)
                skipped.append(f"{label}/{member.name}")
                continue
            with open(os.path.join(tmp, os.path.basename(member.name)), "wb") as f:
                f.write(payload)
    # one sync(2) a class folder, not an fsync an image (1.33M of them would take hours): the
    # folder is on disk before its rename says it is complete
    files.sync_all()
    os.rename(tmp, final)
    files.fsync_dir(split_dir)
    return len(members) - len(skipped), label, skipped




# ---------------------------------------------------------------- command line

def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_imagenet.imagenet.data.prepare",
                                 description="ImageNet's download (train/val tars + devkit or Kaggle labels) "
                                             "straight to shards or an ImageFolder, without extracting")
    ap.add_argument("archives", help=f"folder holding {archives.TRAIN_TAR}, {archives.VAL_TAR} and {archives.DEVKIT} "
                                     f"(or {archives.KAGGLE_MAPPING} + {archives.KAGGLE_VAL})")
    ap.add_argument("dst", help="output folder (new or empty, or an interrupted run to continue)")
    ap.add_argument("--format", choices=("shards", "folder"), default="shards",
                    help="shards (default, as python -m hpc_imagenet.imagenet.data.shards writes) or folder "
                    "(train/<wnid>/, val/<wnid>/)")
    ap.add_argument("--verify-archives", action="store_true",
                    help="first check the archives against ILSVRC 2012's published MD5 sums")
    shards.add_conversion_args(ap)
    a = ap.parse_args(argv)
    options = shards.conversion_options(ap, a)
    return shards.run_conversion(
        lambda: prepare(a.archives, a.dst, a.format, a.shard_size, a.workers, options, a.verify_archives),
        a.dst, a.workers if a.verify and a.format == "shards" else None)


if __name__ == "__main__":
    from hpc_imagenet.imagenet.data.prepare import main  # under its one name, not a copy
    raise SystemExit(main())
