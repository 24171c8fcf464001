"""Copying a staged dataset's files: on a few threads (which keeps a metadata-bound shared filesystem busy
with several opens at once), each to a temp name renamed over the final one so no torn file ever
carries a real name; checksums compared the same way; progress in the job log; the space check made
before anything is copied; removal of what the source lacks."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, List, Sequence, TypeVar

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.terminal import ProgressLine
from hpc_imagenet.imagenet.data.staging_folder import StagingError
from hpc_imagenet.imagenet.data.staging_listing import Listing

TMP_SUFFIX = ".staging-tmp"  # ends every copy's temp name: a rerun removes leftovers as extra files
COPY_THREADS = 8
PROGRESS_SECONDS = 30.0  # plain log lines (not a TTY): one per interval
CHUNK = 1 << 20
BATCH = 64  # files per thread-pool task
T = TypeVar("T")


def check_space(src: Path, dest: Path, wanted: Listing, todo: Sequence[str], have: Listing) -> None:
    """One line with both numbers, before anything is copied."""
    stats = os.statvfs(dest.parent)
    block = stats.f_frsize or 4096
    rounded = lambda n: -(-n // block) * block  # noqa: E731  (files occupy whole blocks)
    needed = sum(rounded(wanted.files[rel][0]) for rel in todo) + block * len(wanted.dirs - have.dirs)
    free = stats.f_bavail * stats.f_frsize
    if needed > free:
        raise StagingError(f"not enough space to stage {src}: it needs {human(needed)} ({needed} bytes) in "
                           f"{dest.parent} but {human(free)} ({free} bytes) is free; free space there or pass "
                           "a --stage-dir with more room (a local NVMe rather than /dev/shm)")


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}" if unit != "B" else f"{size:.0f} B"
        size /= 1024
    return f"{size:.1f} TiB"


def remove_extra(dest: Path, extra: Sequence[str]) -> None:
    """Entries the source does not have, and strays (reverse order: contents before their folder).
    lstat decides: a link is unlinked itself; rmtree does not follow links inside a folder."""
    for rel in extra:
        path = dest / rel if rel else dest
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # inside a folder removed before it
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _copy_one(src: Path, dest: Path, rel: str) -> None:
    with open(src / rel, "rb") as source:
        st = os.fstat(source.fileno())

        def write(out) -> None:
            shutil.copyfileobj(source, out, CHUNK)
            out.flush()
            # the mtime, which the next run compares, set on the open file (no path is followed)
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))

        # a new temp file (O_EXCL: never a planted name), renamed over the final name
        files.atomic_write(dest / rel, write, suffix=TMP_SUFFIX, durable=False)  # the marker vouches later


def copy_all(src: Path, dest: Path, rels: Sequence[str], wanted: Listing, progress_every: float) -> int:
    progress = _Progress(len(rels), sum(wanted.files[r][0] for r in rels), progress_every)
    _in_batches(lambda rel: _copy_one(src, dest, rel), rels,
                lambda batch: progress.advance(len(batch), sum(wanted.files[r][0] for r in batch)))
    progress.close()
    return progress.done_bytes


def _in_batches(work: Callable[[str], T], rels: Sequence[str],
                done: Callable[[Sequence[str]], None] = lambda batch: None) -> List[T]:
    """WORK(rel) for every rel on COPY_THREADS threads, BATCH at a time (a million single-file futures
    would cost gigabytes); DONE(batch) as each batch ends, in order. A failure cancels the batches
    not started and leaves with its own exception once the running ones end: threads are never
    killed, so nothing can be left holding a lock."""
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


def mismatched(src: Path, dest: Path, rels: Sequence[str]) -> List[str]:
    same = _in_batches(lambda rel: _checksum(src / rel) == _checksum(dest / rel), rels)
    return [rel for rel, ok in zip(rels, same) if not ok]


class _Progress:
    """Copy progress through :class:`hpc_imagenet.imagenet.common.terminal.ProgressLine`: a redrawn line on an
    interactive terminal, a plain line every PROGRESS_SECONDS otherwise (job logs)."""

    def __init__(self, files: int, total_bytes: int, every: float):
        self.files, self.total = files, total_bytes
        self.line = ProgressLine(every=every)
        self.done_files = self.done_bytes = 0
        self.start = time.monotonic()

    def advance(self, files: int, nbytes: int) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        if self.done_files < self.files and self.line.due():  # the last batch: the summary line says it
            self.line.show(f"=> {socket.gethostname()}: {self._text()}")

    def _text(self) -> str:
        rate = self.done_bytes / max(time.monotonic() - self.start, 1e-9)
        eta = (self.total - self.done_bytes) / rate if rate else 0.0
        return (f"staging: {self.done_files}/{self.files} files, {human(self.done_bytes)} of "
                f"{human(self.total)} ({100 * self.done_bytes / max(self.total, 1):.0f}%), "
                f"{human(rate)}/s, {eta:.0f} s left")

    def close(self) -> None:
        self.line.close()


def say(message: str) -> None:
    # Every node's copier reports (not only rank 0): each node's copy is its own.
    print(f"=> {socket.gethostname()}: {message}", flush=True)
