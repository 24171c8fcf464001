"""One node's copy: staged under a node lock (a second job staging the same source waits, then reuses),
completed and checked against the source's listing, marked complete last (``.staged.json``, atomically),
held by a shared lock while a job reads it, and removed only when no other job holds it."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Iterator, List

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.data.staging_files import (PROGRESS_SECONDS, check_space, copy_all, human, mismatched,
                                                      remove_extra, say)
from hpc_imagenet.imagenet.data.staging_folder import StagingError, private_folder
from hpc_imagenet.imagenet.data.staging_listing import MARKER, Listing, list_copy, list_source

FORMAT = 2  # 2: the copy lives in the user's private folder; the marker no longer says "verified"

# The shared lock on each copy's "<copy>.users" file that this process holds while it uses the
# copy (POSIX record locks: a forked loader worker does not inherit them, so it never holds one).
_IN_USE: Dict[Path, int] = {}


@dataclass(frozen=True)
class Outcome:
    dest: Path
    reused: bool
    files: int
    bytes_copied: int
    seconds: float


def stage(source: str, dest: Path, verify: bool = False, progress_every: float = PROGRESS_SECONDS,
          hold: bool = False) -> Outcome:
    """Make DEST a complete copy of SOURCE, reusing what an earlier run of this user left there;
    VERIFY also compares every file's checksum with the source's, on reuse too. HOLD: this process
    reads the copy until it ends (a training job), taken before the lock is let go, so that no other
    job's cleanup can remove the copy in between."""
    src = _check_source(source, dest)
    private_folder(dest.parent)
    with _node_lock(dest):
        start = time.monotonic()
        wanted = list_source(src)
        have = list_copy(dest)
        todo = sorted(rel for rel, meta in wanted.files.items() if have.files.get(rel) != meta)
        extra = sorted((set(have.files) - set(wanted.files)) | (have.dirs - wanted.dirs) | have.strays,
                       reverse=True)
        marker = _read_marker(dest)
        complete = marker.get("listing") == wanted.digest() and not todo and not extra
        copied = 0
        if not complete:
            _unlink(dest / MARKER)  # from here on the folder is not a complete copy
            check_space(src, dest, wanted, todo, have)
            remove_extra(dest, extra)
            copied = _sync(src, dest, wanted, todo, progress_every)
        recopied = _verify(src, dest, wanted, progress_every) if verify else []
        copied += sum(wanted.files[rel][0] for rel in recopied)
        seconds = time.monotonic() - start
        if hold:
            _hold(dest)
        if complete and not recopied:
            say(f"reusing the complete staged copy {dest} of {src} ({len(wanted.files)} files, "
                 f"{human(wanted.total_bytes)}, staged {marker.get('staged_at', '?')})"
                 f"{', verified against the source' if verify else ''}")
            return Outcome(dest, True, len(wanted.files), 0, seconds)
        files.sync_all()  # every copied file on disk before the marker says the copy is complete
        _write_marker(dest, src, wanted, seconds)
    count = len(set(todo) | set(recopied))
    say(f"staged {count} of {len(wanted.files)} files ({human(copied)}) from {src} to {dest} in "
         f"{seconds:.1f} s ({human(copied / max(seconds, 1e-9))}/s){', verified' if verify else ''}")
    return Outcome(dest, False, len(wanted.files), copied, seconds)


def _check_source(source: str, dest: Path) -> Path:
    src = Path(source).resolve()
    if not src.is_dir():
        raise StagingError(f"dataset directory {source} does not exist; pass the dataset folder to stage")
    if dest.is_relative_to(src) or src.is_relative_to(dest):
        raise StagingError(f"--stage-dir {dest.parent.parent} and the dataset {src} overlap; stage to a folder "
                           "outside the dataset")
    return src


def _open_private(path: Path) -> int:
    """A lock file in the private folder: created 0600, never through a link."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


@contextmanager
def _node_lock(dest: Path) -> Iterator[None]:
    """Held while staging or removing DEST: a second job staging the same source on this node waits,
    then reuses."""
    fd = _open_private(dest.parent / f"{dest.name}.lock")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process staging to {dest}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _hold(dest: Path) -> None:
    """Take (once per process) the shared lock that says this job reads DEST: a finishing job's
    cleanup leaves the copy alone while another job holds it."""
    if dest not in _IN_USE:
        fd = _open_private(dest.parent / f"{dest.name}.users")
        fcntl.lockf(fd, fcntl.LOCK_SH)
        _IN_USE[dest] = fd


def remove_copy(dest: Path) -> bool:
    """Remove this node's copy DEST unless another process (another job) still holds it; True if
    removed. The marker goes first, so a copy cut short by a crash here is never reused."""
    private_folder(dest.parent)
    with _node_lock(dest):
        fd = _IN_USE.pop(dest, None)
        if fd is None:
            fd = _open_private(dest.parent / f"{dest.name}.users")
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # converts this process's own shared lock
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                say(f"keeping the staged copy {dest}: another job on this node is reading it")
                return False
            _unlink(dest / MARKER)
            if os.path.lexists(dest):
                shutil.rmtree(dest)  # never follows a link (shutil.rmtree.avoids_symlink_attacks on Linux)
        finally:
            os.close(fd)
    say(f"removed the staged copy {dest}")
    return True


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)  # a link is removed itself, never its target
    except FileNotFoundError:
        pass


def _read_marker(dest: Path) -> dict:
    """The marker, if this user wrote it as a plain file (never read through a link)."""
    try:
        fd = os.open(dest / MARKER, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_uid != os.getuid():
            return {}
        try:
            marker = json.loads(f.read())
        except ValueError:
            return {}
    return marker if isinstance(marker, dict) and marker.get("format") == FORMAT else {}


def _write_marker(dest: Path, src: Path, listing: Listing, seconds: float) -> None:
    marker = {"format": FORMAT, "source": str(src), "listing": listing.digest(), "files": len(listing.files),
              "bytes": listing.total_bytes, "seconds": round(seconds, 3), "host": socket.gethostname(),
              "staged_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    files.write_text(dest / MARKER, json.dumps(marker, indent=1) + "\n")


def _sync(src: Path, dest: Path, wanted: Listing, todo: List[str], progress_every: float) -> int:
    dest.mkdir(exist_ok=True)
    for rel in sorted(wanted.dirs):
        (dest / rel).mkdir(exist_ok=True)  # strays were removed: no link stands in for a folder
    return copy_all(src, dest, todo, wanted, progress_every)


def _verify(src: Path, dest: Path, wanted: Listing, progress_every: float) -> List[str]:
    """Compare every file's checksum with the source's; copy those that differ once more (twice
    wrong is a disk problem, not a race). Returns the files copied again."""
    bad = mismatched(src, dest, sorted(wanted.files))
    if not bad:
        return []
    _unlink(dest / MARKER)
    copy_all(src, dest, bad, wanted, progress_every)
    still = mismatched(src, dest, bad)
    if still:
        raise StagingError(f"{dest / still[0]} differs from {src / still[0]} after copying it twice "
                           f"({len(still)} file(s)); check the node-local disk or stage elsewhere")
    return bad
