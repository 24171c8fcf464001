"""ImageFolder -> tar shards in the WebDataset layout, plus an index: ``python -m hpc_imagenet.imagenet.data.shards SRC
DST``.

Each split (train/, val/) becomes ``DST/<split>-NNNNNN.tar`` files of about ``--shard-size`` MB of
source images, each sample two members, ``<key>.jpg`` (the image) and ``<key>.cls`` (its class id
as text), as WebDataset writes them; ``DST/shards-index.npz`` (:mod:`hpc_imagenet.imagenet.data.sources`) records the
classes, the samples of each shard and the byte offset and size of every image payload, so the
engine reads sample i with one ``pread`` on a shard it opened once. Samples keep ImageFolder's order
(class, then file name), so index i is the same image as in the folder.

Why the standard library's ``tarfile`` and not webdataset's TarWriter / ``wids``: random access
needs each payload's byte offset, which ``tarfile`` reports for the members it reads back
(``offset_data``) and webdataset's writer does not; ``wids`` would re-scan every tar on open and
returns decoded samples rather than byte ranges. Reading the written shard back with ``tarfile``
is also the check that it is a standard tar. The layout stays readable by webdataset.

Robustness: a shard is written atomically (:mod:`hpc_imagenet.imagenet.common.files`: a temp file, renamed when
complete),
so a killed conversion leaves only whole shards (a rerun removes its temp files); a rerun with the
same SRC and options skips them (``.shards-plan.json`` records what was planned) and the index,
written last and atomically, means "complete".
``--max-side N`` re-encodes images whose longer side is over N (see docs/data.md, "Shards: data at scale").
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import multiprocessing
import os
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.terminal import ProgressLine
from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import DEFAULT_SHARD_MB, sources
from hpc_imagenet.imagenet.data.scan import scan_dataset


log = logging.getLogger(__name__)

PLAN_NAME = ".shards-plan.json"


@dataclass(frozen=True)
class Options:
    max_side: Optional[int] = None
    quality: int = 90
    skip_bad: bool = False


class Member(NamedTuple):
    """An image stored as SIZE bytes at OFFSET of FILE (a member of an uncompressed tar, read in
    place: :mod:`hpc_imagenet.imagenet.data.prepare`); NAME is how messages call it."""

    file: str
    offset: int
    size: int
    name: str


Source = Union[str, Member]  # an image file's path, or an image inside an archive


@dataclass(frozen=True)
class Job:
    """One shard to write: its file and the source samples (source, class, key) it holds."""

    dst: str
    name: str
    samples: Tuple[Tuple[Source, int, str], ...]
    options: Options


# ---------------------------------------------------------------- one image

def source_name(src: Source) -> str:
    return src.name if isinstance(src, Member) else src


class SourceReader:
    """Reads sources' bytes: a file per image, or a byte range of an archive kept open for all its
    images (an open per image would be a metadata operation per image on a parallel filesystem,
    which is what reading the archives in place avoids)."""

    def __init__(self):
        self._fds: Dict[str, int] = {}

    def __call__(self, src: Source) -> bytes:
        if isinstance(src, str):
            with open(src, "rb") as f:
                return f.read()
        fd = self._fds.get(src.file)
        if fd is None:
            fd = self._fds[src.file] = os.open(src.file, os.O_RDONLY)
        raw = os.pread(fd, src.size, src.offset)
        if len(raw) != src.size:
            raise OSError(f"{src.file} ends inside this image (truncated archive)")
        return raw

    def __enter__(self) -> "SourceReader":
        return self

    def __exit__(self, *exc) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


def encoded(src: Source, options: Options, read: Callable[[Source], bytes]) -> Tuple[bytes, str]:
    """(payload, extension) for a source image: its own bytes, or a re-encoded JPEG when its longer
    side is over --max-side. Raises DataError naming the image if it is not a readable image."""
    try:
        raw = read(src)
        im = Image.open(io.BytesIO(raw))
        if options.max_side and max(im.size) > options.max_side:
            return _shrunk(im, options), "jpg"
        im.verify()  # the header and structure; a lossless repack does not pay for a full decode
        return raw, "jpg" if im.format == "JPEG" else (im.format or "img").lower()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"cannot read image {source_name(src)}: {reason}; replace or remove the file, or pass "
                        "--skip-bad-images to leave it out") from None


def _shrunk(im: Image.Image, options: Options) -> bytes:
    scale = options.max_side / max(im.size)
    size = (max(1, round(im.width * scale)), max(1, round(im.height * scale)))
    out = io.BytesIO()
    im.convert("RGB").resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0).save(
        out, "JPEG", quality=options.quality)
    return out.getvalue()


# ---------------------------------------------------------------- one shard

def _member(name: str, payload: bytes) -> Tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(payload), 0o444, 0  # fixed metadata: same input, same shard
    return info, io.BytesIO(payload)


def write_shard(job: Job) -> dict:
    """Write JOB's shard (unless a complete one exists) and return its index entries."""
    path = os.path.join(job.dst, job.name)
    skipped: List[str] = []
    if not os.path.exists(path):
        files.atomic_write(path, lambda f: _write_tar(f, job, skipped))
    return {"name": job.name, "skipped": skipped, **shard_entries(path)}


def _write_tar(out, job: Job, skipped: List[str]) -> None:
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar, SourceReader() as read:
        for src, target, key in job.samples:
            try:
                payload, ext = encoded(src, job.options, read)
            except DataError as e:
                if not job.options.skip_bad:
                    raise
                log.warning("skipping %s", e)
                skipped.append(source_name(src))
                continue
            tar.addfile(*_member(f"{key}.{ext}", payload))
            tar.addfile(*_member(f"{key}.cls", str(target).encode()))


def shard_entries(path: str) -> dict:
    """Byte range and class of every image in a shard, read back with tarfile (which also proves
    the file is a standard tar)."""
    offsets, sizes, targets = [], [], []
    try:
        with tarfile.open(path, "r:") as tar:
            members = tar.getmembers()
            for image, cls in zip(members[::2], members[1::2]):
                if not cls.name.endswith(".cls") or image.name.rsplit(".", 1)[0] != cls.name[:-4]:
                    raise tarfile.TarError(f"member {image.name} is not followed by its .cls")
                offsets.append(image.offset_data)
                sizes.append(image.size)
                targets.append(int(tar.extractfile(cls).read()))
    except (tarfile.TarError, OSError, ValueError) as e:
        raise DataError(f"shard {path} is not a complete shard ({e}); delete it and run the conversion "
                        "again") from None
    return {"offset": offsets, "size": sizes, "target": targets, "bytes": os.path.getsize(path)}


# ---------------------------------------------------------------- planning

def folder_samples(index: sources.FolderIndex) -> Iterator[Tuple[str, int, int]]:
    """(path, class, bytes) of each image of an ImageFolder split, in its order."""
    for i in range(len(index)):
        path = index.name(i)
        yield path, index.target(i), os.path.getsize(path) if os.path.exists(path) else 0


def plan_split(split: str, samples: Sequence[Tuple[Source, int, int]], shard_bytes: int, dst: str,
               options: Options) -> List[Job]:
    """Consecutive samples (source, class, bytes) in shards of about SHARD_BYTES of source images
    (re-encoded shards come out smaller); a sample's key is its index in the split."""
    jobs, current, size = [], [], 0
    for i, (src, target, nbytes) in enumerate(samples):
        current.append((src, target, f"{i:08d}"))
        size += nbytes
        if size >= shard_bytes or i == len(samples) - 1:
            jobs.append(Job(dst, f"{split}-{len(jobs):06d}.tar", tuple(current), options))
            current, size = [], 0
    return jobs


def plan_fingerprint(src: str, jobs: Dict[str, List[Job]], options: Options) -> dict:
    digest = hashlib.sha256()
    for split in sources.SPLITS:
        for job in jobs[split]:
            digest.update(json.dumps([job.name, job.samples]).encode())
    return {"source": os.path.abspath(src), "options": asdict(options), "samples": digest.hexdigest()}


def check_plan(dst: Path, plan: dict) -> None:
    """A rerun continues only the same conversion; anything else would mix shards of two."""
    path = dst / PLAN_NAME
    if path.exists():
        old = json.loads(path.read_text())
        if old != plan:
            raise DataError(f"{dst} holds the output of a different conversion (source {old.get('source')}, options "
                            f"{old.get('options')}); pass an empty DST or delete {dst}")
        return
    if any(dst.iterdir()):
        raise DataError(f"{dst} is not empty and holds no conversion of ours; pass an empty or new DST folder")
    files.write_text(path, json.dumps(plan))


# ---------------------------------------------------------------- progress

class Progress:
    """Conversion progress (:class:`hpc_imagenet.imagenet.common.terminal.ProgressLine` on stderr): a bar redrawn in
    place on
    an interactive terminal; plain lines (one per finished part: a shard, a class folder) otherwise."""

    def __init__(self, total: int, unit: str = "shards", stream=None):
        self.total, self.unit, self.done, self.images = total, unit, 0, 0
        self.line, self.t0 = ProgressLine(stream or sys.stderr), time.monotonic()

    def update(self, images: int, label: str) -> None:
        self.done += 1
        self.images += images
        rate = self.images / max(time.monotonic() - self.t0, 1e-9)
        text = f"{self.done}/{self.total} {self.unit}, {self.images} images, {rate:.0f} images/s ({label})"
        if self.line.live:
            text = f"[{'#' * (30 * self.done // self.total):30s}] {text}"
        self.line.show(text, final=self.done == self.total)


# ---------------------------------------------------------------- conversion

def run_jobs(jobs: Sequence, workers: int, fn) -> Iterator:
    """fn(job) for each job, results in order, in WORKERS forked processes (in this one for 1).

    A job that raises stops the run with its own exception, whatever the load, because nothing is
    killed: pending jobs are cancelled, the workers finish the jobs they hold (each is bounded) and
    then exit when the executor tells them to, and only then does the exception leave. Killing
    live workers is what hung multiprocessing.Pool: its terminate() joins the thread that feeds
    the task queue, and that thread can be blocked forever on the queue's lock, held by a worker
    it just killed. A worker that dies (killed, out of memory) is one line too."""
    if workers <= 1:
        yield from map(fn, jobs)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        yield from pool.map(fn, jobs)
    except BrokenProcessPool:
        raise DataError(f"a worker process died (killed, or out of memory) while running {fn.__name__}; run "
                        "again (finished parts are kept), with fewer --workers if memory is short") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def convert(src: str, dst: str, shard_mb: float = DEFAULT_SHARD_MB, workers: int = 1,
            options: Options = Options()) -> dict:
    """Convert SRC (ImageFolder) into shards under DST; returns counts. Resumes an interrupted run."""
    if sources.is_shard_folder(src):
        raise DataError(f"{src} is already a shard folder; pass the ImageFolder it came from")
    classes, index = scan_dataset(src)
    samples = {s: list(folder_samples(index[s])) for s in sources.SPLITS}
    return write_splits(src, dst, classes, samples, shard_mb, workers, options)


def write_splits(src: str, dst: str, classes: Sequence[str], samples: Dict[str, Sequence[Tuple[Source, int, int]]],
                 shard_mb: float, workers: int, options: Options, names: Optional[Sequence[str]] = None) -> dict:
    """Write each split's samples (source, class, bytes) into shards under DST, then the index;
    continues an interrupted run of the same conversion (SRC names it in the plan); returns counts."""
    out = Path(dst)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {s: plan_split(s, samples[s], int(shard_mb * 2**20), dst, options) for s in sources.SPLITS}
    check_plan(out, plan_fingerprint(src, jobs, options))
    for stale in files.stale_temps(out):  # left by a killed run; never renamed, so never read
        stale.unlink()
    splits, skipped = {}, []
    progress = Progress(sum(len(j) for j in jobs.values()))
    for split in sources.SPLITS:
        shards = []
        for shard in run_jobs(jobs[split], workers, write_shard):
            progress.update(len(shard["offset"]), shard["name"])
            shards.append(shard)
            skipped += shard["skipped"]
        splits[split] = _split_arrays(shards)
    sources.save_index(out, classes, splits, names)
    return {"classes": len(classes), "skipped": len(skipped),
            **{f"{s}_samples": len(splits[s]["target"]) for s in sources.SPLITS},
            **{f"{s}_shards": len(splits[s]["shards"]) for s in sources.SPLITS}}


def _split_arrays(shards: List[dict]) -> dict:
    return {"shards": [s["name"] for s in shards], "shard_bytes": [s["bytes"] for s in shards],
            "samples": [len(s["offset"]) for s in shards],
            "shard": np.repeat(np.arange(len(shards), dtype=np.int32), [len(s["offset"]) for s in shards]),
            **{k: np.concatenate([np.asarray(s[k], dtype=np.int64) for s in shards]) if shards else []
               for k in ("offset", "size", "target")}}


# ---------------------------------------------------------------- verification

def _verify_shard(args: Tuple[str, str, int]) -> int:
    """Re-read one shard: tar members agree with the index, and every image decodes."""
    root, split, shard = args
    _, index = sources.load_index(root)
    part = index[split]
    ids = np.flatnonzero(part.shard == shard)
    entries = shard_entries(part.shard_path(shard))
    if (entries["offset"] != part.offset[ids].tolist() or entries["size"] != part.size[ids].tolist()
            or entries["target"] != part.targets[ids].tolist()):
        raise DataError(f"shard {part.shard_path(shard)} does not match the index; run the conversion again "
                        "into an empty folder")
    for i in ids:
        try:
            Image.open(io.BytesIO(part.read(int(i)))).load()
        except (OSError, ValueError, SyntaxError) as e:
            raise DataError(f"sample {i} in {part.shard_path(shard)} does not decode ({e}); run the "
                            "conversion again into an empty folder") from None
    part.close()
    return len(ids)


def verify(root: str, workers: int = 1) -> int:
    """Re-read every sample of a shard folder; returns the number checked, raises DataError."""
    _, index = sources.load_index(root)
    jobs = [(root, split, s) for split in sources.SPLITS for s in range(len(index[split].shard_names))]
    return sum(run_jobs(jobs, workers, _verify_shard))


def add_conversion_args(ap: argparse.ArgumentParser) -> None:
    """The flags of every converter into shards (this one and python -m hpc_imagenet.imagenet.data.prepare)."""
    ap.add_argument("--shard-size", type=float, default=DEFAULT_SHARD_MB,
                    help=f"MB of source images per shard (default {DEFAULT_SHARD_MB})")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel readers and writers")
    ap.add_argument("--max-side", type=int, help="re-encode images whose longer side is over N pixels to N")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (default 90)")
    ap.add_argument("--skip-bad-images", action="store_true", help="leave unreadable images out (named in a warning)")
    ap.add_argument("--verify", action="store_true", help="afterwards, re-read and decode every sample of the shards")


def conversion_options(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Options:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.max_side is not None and args.max_side < 1 or not 1 <= args.quality <= 100 or args.workers < 1:
        ap.error("--max-side must be >= 1, --quality in 1..100 and --workers >= 1")
    return Options(args.max_side, args.quality, args.skip_bad_images)


def run_conversion(convert_fn: Callable[[], dict], dst: str, verify_workers: Optional[int]) -> int:
    """Run a conversion for the command line: its counts as JSON, then (VERIFY_WORKERS given) a
    re-read of every shard; a DataError is one line and exit status 1."""
    try:
        print(json.dumps(convert_fn()))
        if verify_workers:
            print(f"verified {verify(dst, verify_workers)} samples")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_imagenet.imagenet.data.shards",
                                 description="convert an ImageFolder (train/, val/) into indexed tar shards")
    ap.add_argument("src", help="ImageFolder root holding train/ and val/")
    ap.add_argument("dst", help="output folder (new or empty, or an interrupted conversion to continue)")
    add_conversion_args(ap)
    a = ap.parse_args(argv)
    options = conversion_options(ap, a)
    return run_conversion(lambda: convert(a.src, a.dst, a.shard_size, a.workers, options), a.dst,
                          a.workers if a.verify else None)


if __name__ == "__main__":
    from hpc_imagenet.imagenet.data.shards import main  # under its one name, not a copy
    raise SystemExit(main())
