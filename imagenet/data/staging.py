"""Node-local staging: ``--stage-dir DIR`` copies the dataset folder to node-local storage
(``$TMPDIR``, ``/dev/shm``, a local NVMe) once per node before the dataset scan; training reads the
copy, so the shared filesystem serves one sequential copy per node instead of random reads by
every loader worker of every rank, every epoch.

Any dataset folder can be staged (ImageFolder trees, shard folders): it is copied file by file,
directories included (an empty class folder is still a class).

Layout: ``DIR/<name>-<hash of the source path>/`` holds the copy. ``.staged.json`` is written
last, atomically, once every file is there with its source's size and modification time (and,
with ``--stage-verify``, its checksum). A later run (a requeue) that finds that marker, the same
source listing and every file in place reuses the copy. Anything else is completed: the marker is
removed first, files missing or different are copied again (each to a temporary name, then
renamed, so a file under its final name is whole), files the source lacks are removed. The space
check comes before any copying and fails with one line giving the space needed and free.

Who copies: one process per node (local rank 0, or the only process). The others wait in a
collective that also carries any copier's error to every rank, so every rank stops with the same
line; the copy must therefore finish within ``--dist-timeout`` (the set-up bound; training runs
under the shorter ``--collective-timeout``). A file lock serialises two jobs
staging the same source into the same folder of one node.

Written here rather than with rsync: rsync is not on every compute node, and the parts this needs
(a space check before copying, a completion marker, progress in the job log, one copier per node
agreeing with the process group) would be wrapped around it anyway. Each file is copied on one of
a few threads (which keeps a metadata-bound shared filesystem busy with several opens at once) to a
temp name and renamed, so no torn file ever carries a real name; one sync(2) before the marker
makes the whole copy durable, instead of two fsyncs per file.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar

from .. import files
from ..terminal import overwrite_progress
from ..errors import one_line

MARKER = ".staged.json"
TMP_SUFFIX = ".staging-tmp"  # ends every copy's temp name: a rerun removes leftovers as extra files
FORMAT = 1
COPY_THREADS = 8
PROGRESS_SECONDS = 30.0  # plain log lines (not a TTY): one per interval
CHUNK = 1 << 20
BATCH = 64  # files per thread-pool task
T = TypeVar("T")


class StagingError(RuntimeError):
    """The dataset cannot be staged; the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class Listing:
    """A folder's contents: files (relative path -> (size, whole-second mtime)) and directories."""

    files: Dict[str, Tuple[int, int]]
    dirs: Set[str]

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.files.values())

    def digest(self) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.dirs):
            h.update(f"d\0{rel}\n".encode())
        for rel, (size, mtime) in sorted(self.files.items()):
            h.update(f"f\0{rel}\0{size}\0{mtime}\n".encode())
        return h.hexdigest()


@dataclass(frozen=True)
class Outcome:
    dest: Path
    reused: bool
    files: int
    bytes_copied: int
    seconds: float


# ---------------------------------------------------------------- entry point for the engine

def stage_data(cfg, info) -> str:
    """The folder training reads (CFG: the settings' data section): its root, or the root's node-local
    copy with --stage-dir (a collective)."""
    if cfg.dummy or not cfg.stage_dir:
        return cfg.root
    from .. import distributed  # here, not at the top: the command line below runs without torch

    dest, error = None, None
    try:  # any failure, on any rank, must reach the collective below: the other ranks wait there
        dest = destination(cfg.root, expand(cfg.stage_dir))
        if info.local_rank == 0 or not distributed.initialized():
            stage(cfg.root, dest, cfg.stage_verify)
    except (StagingError, OSError) as e:
        error = one_line(e) if isinstance(e, StagingError) else f"cannot stage {cfg.root} to {dest}: {e}"
        if distributed.initialized():
            error = f"{socket.gethostname()}: {error}"
    # Everyone waits here for every node's copier; the errors travel with the wait.
    errors = [e for e in distributed.all_gather_object(error) if e]
    if errors:
        raise StagingError(error or errors[0])
    if not (dest / MARKER).is_file():
        raise StagingError(f"no process with local rank 0 staged {cfg.root} on {socket.gethostname()} "
                           f"({dest} is incomplete); check the launcher's local ranks")
    return str(dest)


def expand(stage_dir: str) -> Path:
    """DIR with $VARS and ~ expanded by this process: '$TMPDIR' is each node's own folder."""
    path = os.path.expanduser(os.path.expandvars(stage_dir))
    unset = re.search(r"\$\{?(\w+)", path)
    if unset:
        raise StagingError(f"--stage-dir {stage_dir}: ${unset.group(1)} is not set on {socket.gethostname()}; "
                           "export it or give a plain path")
    return Path(path)


def destination(source: str, stage_dir: Path) -> Path:
    """STAGE_DIR/<source folder name>-<hash of its absolute path>: two datasets never share a copy."""
    src = Path(source).resolve()
    tag = hashlib.sha256(str(src).encode()).hexdigest()[:8]
    return stage_dir.resolve() / f"{src.name or 'data'}-{tag}"


# ---------------------------------------------------------------- one node's copy

def stage(source: str, dest: Path, verify: bool = False, progress_every: float = PROGRESS_SECONDS) -> Outcome:
    """Make DEST a complete copy of SOURCE, reusing what an earlier run left there."""
    src = _check_source(source, dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StagingError(f"cannot create the stage folder {dest.parent} ({e.strerror}); pass a writable "
                           "node-local --stage-dir") from None
    with _node_lock(dest):
        start = time.monotonic()
        wanted = _list(src)
        have = _list(dest) if dest.is_dir() else Listing({}, set())
        todo = sorted(rel for rel, meta in wanted.files.items() if have.files.get(rel) != meta)
        extra = sorted((set(have.files) - set(wanted.files)) | (have.dirs - wanted.dirs), reverse=True)
        marker = _read_marker(dest)
        if (marker.get("listing") == wanted.digest() and not todo and not extra
                and (marker.get("verified") or not verify)):
            _say(f"reusing the complete staged copy {dest} of {src} ({len(wanted.files)} files, "
                 f"{_human(wanted.total_bytes)}, staged {marker.get('staged_at', '?')})")
            return Outcome(dest, True, len(wanted.files), 0, time.monotonic() - start)
        (dest / MARKER).unlink(missing_ok=True)  # from here on the folder is not a complete copy
        _check_space(src, dest, wanted, todo, have)
        _remove(dest, extra)
        copied = _sync(src, dest, wanted, todo, verify, progress_every)
        seconds = time.monotonic() - start
        files.sync_all()  # every copied file on disk before the marker says the copy is complete
        _write_marker(dest, src, wanted, verify, seconds)
    _say(f"staged {len(todo)} of {len(wanted.files)} files ({_human(copied)}) from {src} to {dest} in "
         f"{seconds:.1f} s ({_human(copied / max(seconds, 1e-9))}/s){', verified' if verify else ''}")
    return Outcome(dest, False, len(wanted.files), copied, seconds)


def _check_source(source: str, dest: Path) -> Path:
    src = Path(source).resolve()
    if not src.is_dir():
        raise StagingError(f"dataset directory {source} does not exist; pass the dataset folder to stage")
    if dest.is_relative_to(src) or src.is_relative_to(dest):
        raise StagingError(f"--stage-dir {dest.parent} and the dataset {src} overlap; stage to a folder "
                           "outside the dataset")
    return src


@contextmanager
def _node_lock(dest: Path) -> Iterator[None]:
    """Held while staging DEST: a second job staging the same source on this node waits, then reuses."""
    with open(dest.parent / f"{dest.name}.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for another process staging to {dest}")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _list(root: Path) -> Listing:
    files, dirs = {}, set()
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise, followlinks=True):
        base = os.path.relpath(dirpath, root)
        prefix = "" if base == "." else base + os.sep
        dirs.update(prefix + d for d in dirnames)
        for name in filenames:
            rel = prefix + name
            if rel == MARKER:
                continue
            st = os.stat(os.path.join(dirpath, name))
            files[rel] = (st.st_size, int(st.st_mtime))
    return Listing(files, dirs)


def _raise(error: OSError) -> None:
    raise error  # os.walk would skip an unreadable folder silently: the copy would lack it


def _read_marker(dest: Path) -> dict:
    try:
        marker = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) and marker.get("format") == FORMAT else {}


def _write_marker(dest: Path, src: Path, listing: Listing, verified: bool, seconds: float) -> None:
    marker = {"format": FORMAT, "source": str(src), "listing": listing.digest(), "files": len(listing.files),
              "bytes": listing.total_bytes, "verified": verified, "seconds": round(seconds, 3),
              "host": socket.gethostname(), "staged_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    files.write_text(dest / MARKER, json.dumps(marker, indent=1) + "\n")


# ---------------------------------------------------------------- space

def _check_space(src: Path, dest: Path, wanted: Listing, todo: Sequence[str], have: Listing) -> None:
    """One line with both numbers, before anything is copied."""
    stats = os.statvfs(dest.parent)
    block = stats.f_frsize or 4096
    rounded = lambda n: -(-n // block) * block  # noqa: E731  (files occupy whole blocks)
    needed = sum(rounded(wanted.files[rel][0]) for rel in todo) + block * len(wanted.dirs - have.dirs)
    free = stats.f_bavail * stats.f_frsize
    if needed > free:
        raise StagingError(f"not enough space to stage {src}: it needs {_human(needed)} ({needed} bytes) in "
                           f"{dest.parent} but {_human(free)} ({free} bytes) is free; free space there or pass "
                           "a --stage-dir with more room (a local NVMe rather than /dev/shm)")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} TiB"


# ---------------------------------------------------------------- copying

def _remove(dest: Path, extra: Sequence[str]) -> None:
    """Files and folders the source does not have (reverse order: contents before their folder)."""
    for rel in extra:
        path = dest / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _sync(src: Path, dest: Path, wanted: Listing, todo: List[str], verify: bool, progress_every: float) -> int:
    dest.mkdir(exist_ok=True)
    for rel in sorted(wanted.dirs):
        (dest / rel).mkdir(exist_ok=True)
    copied = _copy_all(src, dest, todo, wanted, progress_every)
    if not verify:
        return copied
    bad = _mismatched(src, dest, sorted(wanted.files))
    if bad:  # copy once more; twice wrong is a disk problem, not a race
        copied += _copy_all(src, dest, bad, wanted, progress_every)
        still = _mismatched(src, dest, bad)
        if still:
            raise StagingError(f"{dest / still[0]} differs from {src / still[0]} after copying it twice "
                               f"({len(still)} file(s)); check the node-local disk or stage elsewhere")
    return copied


def _copy_one(src: Path, dest: Path, rel: str) -> None:
    target = dest / rel
    with open(src / rel, "rb") as source:
        files.atomic_write(target, lambda f: shutil.copyfileobj(source, f, CHUNK), suffix=TMP_SUFFIX,
                           durable=False)  # the marker, written after one sync, vouches for the copy
    # the mtime, which the next run compares; a crash before this only makes that run copy it again
    shutil.copystat(src / rel, target)


def _copy_all(src: Path, dest: Path, rels: Sequence[str], wanted: Listing, progress_every: float) -> int:
    progress = _Progress(len(rels), sum(wanted.files[r][0] for r in rels), progress_every)
    _in_batches(lambda rel: _copy_one(src, dest, rel), rels,
                lambda batch: progress.advance(len(batch), sum(wanted.files[r][0] for r in batch)))
    progress.close()
    return progress.done_bytes


def _in_batches(work: Callable[[str], T], rels: Sequence[str],
                done: Callable[[Sequence[str]], None] = lambda batch: None) -> List[T]:
    """WORK(rel) for every rel on COPY_THREADS threads, BATCH at a time (a million single-file futures
    would cost gigabytes); DONE(batch) as each batch ends, in order. A failure cancels the rest."""
    batches = [rels[i:i + BATCH] for i in range(0, len(rels), BATCH)]
    results: List[T] = []
    pool = ThreadPoolExecutor(COPY_THREADS)
    try:
        for batch, out in zip(batches, pool.map(lambda b: [work(rel) for rel in b], batches)):
            results.extend(out)
            done(batch)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def _checksum(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _mismatched(src: Path, dest: Path, rels: Sequence[str]) -> List[str]:
    same = _in_batches(lambda rel: _checksum(src / rel) == _checksum(dest / rel), rels)
    return [rel for rel, ok in zip(rels, same) if not ok]


class _Progress:
    """A rewritten line on an interactive terminal (imagenet.terminal); otherwise a plain line every
    PROGRESS_SECONDS (job logs)."""

    def __init__(self, files: int, total_bytes: int, every: float):
        self.files, self.total = files, total_bytes
        self.tty = overwrite_progress()
        self.every = 0.5 if self.tty else every
        self.done_files = self.done_bytes = 0
        self.start = self.last = time.monotonic()

    def advance(self, files: int, nbytes: int) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        now = time.monotonic()
        if now - self.last >= self.every and self.done_files < self.files:
            self.last = now
            self._show(now)

    def _show(self, now: float) -> None:
        rate = self.done_bytes / max(now - self.start, 1e-9)
        eta = (self.total - self.done_bytes) / rate if rate else 0.0
        line = (f"staging: {self.done_files}/{self.files} files, {_human(self.done_bytes)} of "
                f"{_human(self.total)} ({100 * self.done_bytes / max(self.total, 1):.0f}%), "
                f"{_human(rate)}/s, {eta:.0f} s left")
        if self.tty:
            sys.stdout.write(f"\r=> {line}\033[K")
            sys.stdout.flush()
        else:
            _say(line)

    def close(self) -> None:
        if self.tty and self.last > self.start:
            sys.stdout.write("\n")


def _say(message: str) -> None:
    # Every node's copier reports (not only rank 0): each node's copy is its own.
    print(f"=> {socket.gethostname()}: {message}", flush=True)


# ---------------------------------------------------------------- command line

def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m imagenet.staging DATA DIR``: stage ahead of training, e.g. once per node with
    ``srun --ntasks-per-node=1``; prints the copy's folder last. Training with the same
    ``--stage-dir DIR`` then finds the copy complete and reuses it."""
    parser = argparse.ArgumentParser(prog="python -m imagenet.staging",
                                     description="Copy a dataset folder to node-local storage (or reuse the copy)")
    parser.add_argument("data", help="dataset folder to copy")
    parser.add_argument("stage_dir", metavar="DIR", help="node-local folder ($VARS are expanded here)")
    parser.add_argument("--verify", action="store_true", help="also compare checksums with the source")
    args = parser.parse_args(argv)
    try:
        dest = destination(args.data, expand(args.stage_dir))
        stage(args.data, dest, args.verify)
    except (StagingError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
