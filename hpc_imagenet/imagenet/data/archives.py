"""ImageNet's official download, read in place: which image is where, and which class it is.

The download (image-net.org, ILSVRC 2012) is three files, found by name in one folder:

- ``ILSVRC2012_img_train.tar``: a tar of 1,000 per-class tars (``n01440764.tar``...), each holding
  that class's ``n01440764_*.JPEG``;
- ``ILSVRC2012_img_val.tar``: 50,000 flat ``ILSVRC2012_val_NNNNNNNN.JPEG``;
- the validation labels, from ``ILSVRC2012_devkit_t12.tar.gz`` (``data/meta.mat``, whose
  ``synsets`` struct maps ILSVRC2012_ID to WNID, and ``data/ILSVRC2012_validation_ground_truth.txt``,
  one ID per validation image in order) or from Kaggle's ``LOC_synset_mapping.txt`` +
  ``LOC_val_solution.csv``.

Nothing is extracted: every image becomes a :class:`hpc_imagenet.imagenet.data.shards.Member`, its byte range in the
archive. The standard library's ``tarfile`` reads only the 512-byte headers of a seekable tar and
seeks over the data; opened on a file positioned at an inner tar's data, it reports offsets in the
outer file, so the inner tars are indexed independently (in parallel) without reading any image.
tarfile stops silently at a header cut short, so :func:`tar_members` also requires the end-of-archive
blocks: a truncated archive is an error, not a smaller dataset. ``meta.mat`` is a MATLAB file,
read with SciPy's ``loadmat`` (the standard reader; torchvision's ``ImageNet`` uses it too).
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import posixpath
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data.shards import Member

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
KAGGLE_MAPPING = "LOC_synset_mapping.txt"
KAGGLE_VAL = "LOC_val_solution.csv"
# The published MD5 sums of the ILSVRC 2012 files (torchvision's ImageNet class lists the same).
MD5 = {TRAIN_TAR: "1d675b47d978889d74fa0da5fadfb00e", VAL_TAR: "29b22e2961454d5413ddabcf34fc5622",
       DEVKIT: "fa75699e90414af021442c21a62c3abf"}
DOWNLOAD = "download it from https://image-net.org (ILSVRC 2012)"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
META = "data/meta.mat"
_VAL_NAME = re.compile(r"ILSVRC2012_val_(\d+)\.\w+$")
_END_BLOCKS = 2 * tarfile.BLOCKSIZE  # a tar ends with two zero blocks


@dataclass(frozen=True)
class Archives:
    """The files of one download: the two image tars and the labels (devkit, or Kaggle's pair)."""

    train: str
    val: str
    devkit: Optional[str] = None
    kaggle: Optional[Tuple[str, str]] = None

    def checked(self) -> List[str]:
        """The files --verify-archives checks: those with a published MD5."""
        return [p for p in (self.train, self.val, self.devkit) if p]


def find(folder: str) -> Archives:
    """The archives in FOLDER, or DataError naming what is missing."""
    root = Path(folder)
    if not root.is_dir():
        raise DataError(f"archive folder {folder} does not exist; pass the folder holding {TRAIN_TAR}, {VAL_TAR} "
                        f"and {DEVKIT}")
    for name in (TRAIN_TAR, VAL_TAR):
        if not (root / name).is_file():
            raise DataError(f"{root / name} is missing; {DOWNLOAD} into {folder}")
    if (root / DEVKIT).is_file():
        return Archives(str(root / TRAIN_TAR), str(root / VAL_TAR), devkit=str(root / DEVKIT))
    if (root / KAGGLE_MAPPING).is_file() and (root / KAGGLE_VAL).is_file():
        return Archives(str(root / TRAIN_TAR), str(root / VAL_TAR),
                        kaggle=(str(root / KAGGLE_MAPPING), str(root / KAGGLE_VAL)))
    raise DataError(f"no validation labels in {folder}: put {DEVKIT} there ({DOWNLOAD}), or Kaggle's "
                    f"{KAGGLE_MAPPING} and {KAGGLE_VAL}")


def md5(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def check_md5(path: str) -> str:
    """PATH's MD5 if it is the published one, else DataError (a corrupt or incomplete download)."""
    expected, actual = MD5[os.path.basename(path)], md5(path)
    if actual != expected:
        raise DataError(f"{path} has MD5 {actual}, not the published {expected}: the download is corrupt or "
                        f"incomplete; {DOWNLOAD} again")
    return path


# ---------------------------------------------------------------- tar members in place

def tar_members(path: str, start: int = 0, end: Optional[int] = None, label: str = "") -> List[Tuple[str, int, int]]:
    """(name, data offset in PATH, size) of each regular file of the tar stored at [START, END) of
    PATH, in archive order; DataError if that tar is cut short or is not a tar."""
    label = label or path
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size if end is None else end
        f.seek(start)
        out = []
        try:
            tar = tarfile.open(fileobj=f, mode="r:")
            for m in tar:
                if m.offset_data + m.size > end:
                    raise tarfile.ReadError(f"member {m.name} ends past the end")
                if m.isfile():
                    out.append((m.name, m.offset_data, m.size))
            stop = tar.offset  # the end-of-archive blocks start here
        except (tarfile.TarError, EOFError) as e:
            raise DataError(f"{label} is not a complete tar archive ({e}); {DOWNLOAD} again") from None
        if stop + _END_BLOCKS > end or os.pread(f.fileno(), _END_BLOCKS, stop) != bytes(_END_BLOCKS):
            raise DataError(f"{label} is truncated (no end-of-archive after {len(out)} files); {DOWNLOAD} again")
    return out


def class_tars(train_tar: str) -> List[Tuple[str, int, int]]:
    """(wnid, offset, size) of each per-class tar in the train archive, sorted by WNID."""
    found = []
    for name, offset, size in tar_members(train_tar):
        base = posixpath.basename(name)
        if not base.endswith(".tar"):
            raise DataError(f"{train_tar} holds {name}, not a per-class tar: it is not ImageNet's train archive")
        found.append((base[:-4], offset, size))
    if not found:
        raise DataError(f"{train_tar} holds no per-class tars; {DOWNLOAD} again")
    return sorted(found)


def class_images(args: Tuple[str, str, int, int]) -> List[Member]:
    """The images of one per-class tar (train archive, wnid, offset, size), sorted by file name as an
    ImageFolder lists them."""
    train_tar, wnid, offset, size = args
    label = f"{os.path.basename(train_tar)}/{wnid}.tar"
    members = tar_members(train_tar, offset, offset + size, label)
    images = [Member(train_tar, o, n, f"{label}/{posixpath.basename(name)}") for name, o, n in members]
    return sorted(images, key=lambda m: m.name)


def val_images(val_tar: str) -> List[Tuple[int, Member]]:
    """(ILSVRC2012 number, image) of each validation image, sorted by file name."""
    label, out = os.path.basename(val_tar), []
    for name, offset, size in tar_members(val_tar):
        base = posixpath.basename(name)
        match = _VAL_NAME.match(base)
        if not match:
            raise DataError(f"{val_tar} holds {name}, not an ILSVRC2012_val_NNNNNNNN image: it is not ImageNet's "
                            "validation archive")
        out.append((int(match.group(1)), Member(val_tar, offset, size, f"{label}/{base}")))
    return sorted(out, key=lambda x: posixpath.basename(x[1].name))


# ---------------------------------------------------------------- validation labels

def devkit_labels(devkit: str) -> Tuple[Dict[int, str], Dict[str, str]]:
    """({validation image number: WNID}, {WNID: name}) from the devkit's ground truth and meta.mat."""
    try:
        import scipy.io  # only the devkit needs SciPy
    except ImportError:
        raise DataError(f"reading {devkit}'s {META} needs SciPy: pip install scipy (or use Kaggle's "
                        f"{KAGGLE_MAPPING} + {KAGGLE_VAL})") from None
    files = _read_members(devkit, (META, GROUND_TRUTH))
    try:
        synsets = scipy.io.loadmat(io.BytesIO(files[META]), squeeze_me=True)["synsets"]
        leaves = synsets[synsets["num_children"] == 0]  # WordNet's inner nodes are not classes
        id_to_wnid = {int(i): str(w) for i, w in zip(leaves["ILSVRC2012_ID"], leaves["WNID"])}
        names = {str(w): str(n) for w, n in zip(leaves["WNID"], leaves["words"])}
        ids = [int(line) for line in files[GROUND_TRUTH].decode().split()]
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise DataError(f"{devkit} has an unreadable {META} or {GROUND_TRUTH} ({e}); {DOWNLOAD} again") from None
    unknown = sorted(set(ids) - set(id_to_wnid))
    if unknown:
        raise DataError(f"{devkit}: the ground truth names class IDs {unknown[:3]} that {META} does not list as "
                        f"classes; {DOWNLOAD} again")
    return {n: id_to_wnid[i] for n, i in enumerate(ids, 1)}, names


def _read_members(archive: str, wanted: Sequence[str]) -> Dict[str, bytes]:
    found = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for m in tar:
                for suffix in wanted:
                    if m.isfile() and m.name.endswith("/" + suffix):
                        found[suffix] = tar.extractfile(m).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{archive} is not a complete .tar.gz ({e}); {DOWNLOAD} again") from None
    missing = [w for w in wanted if w not in found]
    if missing:
        raise DataError(f"{archive} has no {missing[0]}: it is not the ILSVRC 2012 devkit; {DOWNLOAD} again")
    return found


def kaggle_labels(mapping: str, solution: str) -> Tuple[Dict[int, str], Dict[str, str]]:
    """({validation image number: WNID}, {WNID: name}) from Kaggle's mapping and solution files."""
    names = {}
    with open(mapping, encoding="utf-8") as f:
        for line in f:
            wnid, _, name = line.strip().partition(" ")
            if wnid:
                names[wnid] = name
    labels = {}
    with open(solution, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                match = _VAL_NAME.match(row["ImageId"] + ".JPEG")
                labels[int(match.group(1))] = row["PredictionString"].split()[0]
            except (KeyError, AttributeError, IndexError):
                raise DataError(f"{solution} line {len(labels) + 2} is not 'ILSVRC2012_val_N,WNID ...': not "
                                "Kaggle's LOC_val_solution.csv") from None
    return labels, names


def val_labels(archives: Archives) -> Tuple[Dict[int, str], Dict[str, str]]:
    if archives.devkit:
        return devkit_labels(archives.devkit)
    return kaggle_labels(*archives.kaggle)


def labelled_val(images: List[Tuple[int, Member]], labels: Dict[int, str], classes: Sequence[str],
                 source: str) -> List[Tuple[Member, int]]:
    """Each validation image with its class index; DataError if the labels do not fit the images."""
    if len(labels) != len(images):
        raise DataError(f"{source} labels {len(labels)} validation images but the validation archive holds "
                        f"{len(images)}: the labels belong to another download; use ILSVRC 2012's")
    index = {wnid: i for i, wnid in enumerate(classes)}
    strangers = sorted(set(labels.values()) - set(index))
    if strangers:
        raise DataError(f"{source} labels validation images as {strangers[0]}, which has no training class in the "
                        "train archive; the labels belong to another download")
    try:
        return [(member, index[labels[number]]) for number, member in images]
    except KeyError as e:
        raise DataError(f"{source} has no label for validation image number {e}; use ILSVRC 2012's labels") from None
