"""Node-local staging: ``--stage-dir DIR`` copies the dataset folder to node-local storage
(``$TMPDIR``, ``/dev/shm``, a local NVMe) once per node before the dataset scan; training reads the
copy, so the shared filesystem serves one sequential copy per node instead of random reads by
every loader worker of every rank, every epoch.

Any dataset folder can be staged (ImageFolder trees, shard folders): it is copied file by file,
directories included (an empty class folder is still a class).

Layout: ``DIR/<user>/<name>-<hash of the source path>/`` holds the copy. ``DIR/<user>`` is the
user's private folder (created 0700): a folder of that name that another user owns, that others
can write, or that is a symbolic link is refused with one line, and so is a DIR that others can
write without the sticky bit (they could swap the private folder). Only this user can then write
inside, so nobody else can plant files, links or locks in the copy.

``.staged.json`` is written last, atomically, once every file is there with its source's size and
modification time. A later run (a requeue) that finds that marker, the same source listing and
every file in place reuses the copy; with ``--stage-verify`` it also compares every file's checksum
with the source's (the marker is never taken as proof). Anything else is completed: the marker is
removed first, files missing or different are copied again (each to a temporary name, then
renamed, so a file under its final name is whole), anything the source lacks is removed. The space
check comes before any copying and fails with one line giving the space needed and free.

Links: the source may be built of symbolic links (they are followed, as a dataset reader would);
the copy never holds one. Its listing uses ``lstat`` and descends no link; a link, a special file or
a file of another owner found in it is removed as the link itself (never its target) and the file
copied again. Removal of folders uses ``shutil.rmtree``, which does not follow links on Linux.

Who copies: one process per node (local rank 0, or the only process). The others wait in a
collective that also carries any copier's error to every rank, so every rank stops with the same
line; the copy must therefore finish within ``--dist-timeout`` (the set-up bound; training runs
under the shorter ``--collective-timeout``). A file lock in the private folder serialises two jobs
staging the same source on one node.

Cleanup (``--stage-cleanup``, the default for a DIR under ``/dev/shm``): when a run ends normally,
after every process of the job is done, local rank 0 removes the node's copy, unless another job
on the node still reads it (each job's copier holds a shared lock on ``<copy>.users`` while it
runs). A stopped run (preempted, requeued) or a failed one keeps the copy for its next start.

Written here rather than with rsync: rsync is not on every compute node, and the parts this needs
(a space check before copying, a completion marker, progress in the job log, one copier per node
agreeing with the process group) would be wrapped around it anyway. Each file is copied on one of
a few threads (which keeps a metadata-bound shared filesystem busy with several opens at once) to a
temp name and renamed, so no torn file ever carries a real name; one sync(2) before the marker
makes the whole copy durable, instead of two fsyncs per file.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar

from ..common import files
from ..common.terminal import ProgressLine
from ..common.errors import one_line

MARKER = ".staged.json"
TMP_SUFFIX = ".staging-tmp"  # ends every copy's temp name: a rerun removes leftovers as extra files
FORMAT = 2  # 2: the copy lives in the user's private folder; the marker no longer says "verified"
COPY_THREADS = 8
PROGRESS_SECONDS = 30.0  # plain log lines (not a TTY): one per interval
CHUNK = 1 << 20
BATCH = 64  # files per thread-pool task
SHARED_MEMORY = "/dev/shm"  # a copy here holds the node's memory: removed after the job by default
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
T = TypeVar("T")

# The shared lock on each copy's "<copy>.users" file that this process holds while it uses the
# copy (POSIX record locks: a forked loader worker does not inherit them, so it never holds one).
_IN_USE: Dict[Path, int] = {}


class StagingError(RuntimeError):
    """The dataset cannot be staged; the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class Listing:
    """A folder's contents: files (relative path -> (size, whole-second mtime)), directories, and
    strays (links, special files, files of other owners: never part of a copy)."""

    files: Dict[str, Tuple[int, int]]
    dirs: Set[str]
    strays: Set[str] = field(default_factory=set)

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


# ---------------------------------------------------------------- entry points for the engine

def stage_data(cfg, info) -> str:
    """The folder training reads (CFG: the settings' data section): its root, or the root's node-local
    copy with --stage-dir (a collective)."""
    if cfg.dummy or not cfg.stage_dir:
        return cfg.root
    from ..process import group  # here, not at the top: the command line below runs without torch

    dest, error = None, None
    try:  # any failure, on any rank, must reach the collective below: the other ranks wait there
        dest = destination(cfg.root, expand(cfg.stage_dir))
        if info.local_rank == 0 or not group.initialized():
            stage(cfg.root, dest, cfg.stage_verify, hold=True)
    except (StagingError, OSError) as e:
        error = one_line(e) if isinstance(e, StagingError) else f"cannot stage {cfg.root} to {dest}: {e}"
        if group.initialized():
            error = f"{socket.gethostname()}: {error}"
    # Everyone waits here for every node's copier; the errors travel with the wait.
    errors = [e for e in group.all_gather_object(error) if e]
    if errors:
        raise StagingError(error or errors[0])
    if not (dest / MARKER).is_file():
        raise StagingError(f"no process with local rank 0 staged {cfg.root} on {socket.gethostname()} "
                           f"({dest} is incomplete); check the launcher's local ranks")
    return str(dest)


def release_data(cfg, info, finished: bool) -> None:
    """At the end of a run: with cleanup on, once every process of the job is done, local rank 0
    removes the node's copy. A run that stops to continue later (preempted, requeued) or fails keeps
    it. A failure to remove is a warning: the training itself is over."""
    if cfg.dummy or not cfg.stage_dir or not finished:
        return
    from ..process import group  # here, not at the top: the command line below runs without torch

    # Every process of the job has finished reading the copy. Each node decides for itself after
    # the wait ('$TMPDIR' may be /dev/shm on one node only): every rank must reach the collective.
    group.all_gather_object(None)
    if (info.local_rank == 0 or not group.initialized()) and cleanup_wanted(cfg.stage_cleanup, cfg.stage_dir):
        dest = destination(cfg.root, expand(cfg.stage_dir))
        try:
            remove_copy(dest)
        except (StagingError, OSError) as e:
            _say(f"warning: the staged copy {dest} was not removed: {one_line(e)}")


def cleanup_wanted(choice: Optional[bool], stage_dir: str) -> bool:
    """--stage-cleanup / --no-stage-cleanup as given; unset, only for a DIR in shared memory."""
    if choice is not None:
        return choice
    return Path(os.path.realpath(expand(stage_dir))).is_relative_to(SHARED_MEMORY)


def expand(stage_dir: str) -> Path:
    """DIR with $VARS and ~ expanded by this process: '$TMPDIR' is each node's own folder."""
    path = os.path.expanduser(os.path.expandvars(stage_dir))
    unset = re.search(r"\$\{?(\w+)", path)
    if unset:
        raise StagingError(f"--stage-dir {stage_dir}: ${unset.group(1)} is not set on {socket.gethostname()}; "
                           "export it or give a plain path")
    return Path(path)


def user_name() -> str:
    """This user's name (the private folder's), or the uid where the node has no name for it."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def destination(source: str, stage_dir: Path) -> Path:
    """STAGE_DIR/<user>/<source folder name>-<hash of its absolute path>: two datasets never share a
    copy, and two users never share a folder. STAGE_DIR is resolved; the rest never is (a link
    there is refused, not followed)."""
    src = Path(source).resolve()
    tag = hashlib.sha256(str(src).encode()).hexdigest()[:8]
    return stage_dir.resolve() / user_name() / f"{src.name or 'data'}-{tag}"


# ---------------------------------------------------------------- the private folder

def private_folder(folder: Path) -> Path:
    """Create FOLDER (DIR/<user>) 0700 if missing; StagingError unless it is this user's own real
    folder that no one else can write, in a DIR where no one else can replace it."""
    stage_dir = folder.parent
    try:
        stage_dir.mkdir(parents=True, exist_ok=True)
        _check_stage_dir(stage_dir)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        st = os.lstat(folder)
    except OSError as e:
        raise StagingError(f"cannot create the stage folder {folder} ({e.strerror}); pass a writable "
                           "node-local --stage-dir") from None
    _check_own(folder, st)
    return folder


def _check_stage_dir(stage_dir: Path) -> None:
    """DIR's owner, and anyone who may write a sticky-less DIR, can rename the folders in it."""
    st = os.stat(stage_dir)
    if st.st_uid not in (0, os.getuid()):
        raise StagingError(f"--stage-dir {stage_dir} belongs to {_owner(st.st_uid)}, who could replace your folder "
                           "in it; pass a folder of your own or the system's (/tmp, /dev/shm, '$TMPDIR')")
    if st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        raise StagingError(f"--stage-dir {stage_dir} can be written by other users and has no sticky bit "
                           f"(mode {stat.S_IMODE(st.st_mode):04o}), so they could replace your folder in it; "
                           f"its owner can run chmod +t {stage_dir} (as /tmp and /dev/shm have), or pass "
                           "another --stage-dir")


def _check_own(folder: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise StagingError(f"the stage folder {folder} is a symbolic link (to {os.readlink(folder)}), which "
                           "someone else may have planted; remove it, or pass another --stage-dir")
    if not stat.S_ISDIR(st.st_mode):
        raise StagingError(f"the stage folder {folder} is not a folder; remove it, or pass another --stage-dir")
    if st.st_uid != os.getuid():
        raise StagingError(f"the stage folder {folder} belongs to {_owner(st.st_uid)}, not to you "
                           f"({user_name()}): its contents cannot be trusted; ask its owner or the admins to "
                           "remove it, or pass another --stage-dir")
    if st.st_mode & OTHERS_WRITE:
        raise StagingError(f"the stage folder {folder} can be written by other users (mode "
                           f"{stat.S_IMODE(st.st_mode):04o}); run chmod 700 {folder} (a copy there is "
                           "checked again), or pass another --stage-dir")


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


# ---------------------------------------------------------------- one node's copy

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
        wanted = _list_source(src)
        have = _list_copy(dest)
        todo = sorted(rel for rel, meta in wanted.files.items() if have.files.get(rel) != meta)
        extra = sorted((set(have.files) - set(wanted.files)) | (have.dirs - wanted.dirs) | have.strays,
                       reverse=True)
        marker = _read_marker(dest)
        complete = marker.get("listing") == wanted.digest() and not todo and not extra
        copied = 0
        if not complete:
            _unlink(dest / MARKER)  # from here on the folder is not a complete copy
            _check_space(src, dest, wanted, todo, have)
            _remove(dest, extra)
            copied = _sync(src, dest, wanted, todo, progress_every)
        recopied = _verify(src, dest, wanted, progress_every) if verify else []
        copied += sum(wanted.files[rel][0] for rel in recopied)
        seconds = time.monotonic() - start
        if hold:
            _hold(dest)
        if complete and not recopied:
            _say(f"reusing the complete staged copy {dest} of {src} ({len(wanted.files)} files, "
                 f"{_human(wanted.total_bytes)}, staged {marker.get('staged_at', '?')})"
                 f"{', verified against the source' if verify else ''}")
            return Outcome(dest, True, len(wanted.files), 0, seconds)
        files.sync_all()  # every copied file on disk before the marker says the copy is complete
        _write_marker(dest, src, wanted, seconds)
    count = len(set(todo) | set(recopied))
    _say(f"staged {count} of {len(wanted.files)} files ({_human(copied)}) from {src} to {dest} in "
         f"{seconds:.1f} s ({_human(copied / max(seconds, 1e-9))}/s){', verified' if verify else ''}")
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
            _say(f"waiting for another process staging to {dest}")
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
                _say(f"keeping the staged copy {dest}: another job on this node is reading it")
                return False
            _unlink(dest / MARKER)
            if os.path.lexists(dest):
                shutil.rmtree(dest)  # never follows a link (shutil.rmtree.avoids_symlink_attacks on Linux)
        finally:
            os.close(fd)
    _say(f"removed the staged copy {dest}")
    return True


def _list_source(root: Path) -> Listing:
    """The dataset's files and folders; links in it are followed (a dataset may be built of them)."""
    found, dirs = {}, set()
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise, followlinks=True):
        base = os.path.relpath(dirpath, root)
        prefix = "" if base == "." else base + os.sep
        dirs.update(prefix + d for d in dirnames)
        for name in filenames:
            st = os.stat(os.path.join(dirpath, name))
            found[prefix + name] = (st.st_size, int(st.st_mtime))
    return Listing(found, dirs)


def _list_copy(dest: Path) -> Listing:
    """The copy's own files and folders, read with lstat and never through a link; anything that a
    copy never holds is a stray, to be removed. A DEST that is not a real folder is all stray."""
    listing = Listing({}, set(), set())
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return listing
    if not stat.S_ISDIR(st.st_mode):
        listing.strays.add("")
        return listing
    _scan_copy(dest, "", listing)
    return listing


def _scan_copy(folder: Path, prefix: str, listing: Listing) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            rel = prefix + entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                listing.dirs.add(rel)
                _scan_copy(folder / entry.name, rel + os.sep, listing)
            elif stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                if rel != MARKER:
                    listing.files[rel] = (st.st_size, int(st.st_mtime))
            else:
                listing.strays.add(rel)


def _raise(error: OSError) -> None:
    raise error  # os.walk would skip an unreadable folder silently: the copy would lack it


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


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}" if unit != "B" else f"{size:.0f} B"
        size /= 1024
    return f"{size:.1f} TiB"


# ---------------------------------------------------------------- copying

def _remove(dest: Path, extra: Sequence[str]) -> None:
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


def _sync(src: Path, dest: Path, wanted: Listing, todo: List[str], progress_every: float) -> int:
    dest.mkdir(exist_ok=True)
    for rel in sorted(wanted.dirs):
        (dest / rel).mkdir(exist_ok=True)  # strays were removed: no link stands in for a folder
    return _copy_all(src, dest, todo, wanted, progress_every)


def _verify(src: Path, dest: Path, wanted: Listing, progress_every: float) -> List[str]:
    """Compare every file's checksum with the source's; copy those that differ once more (twice
    wrong is a disk problem, not a race). Returns the files copied again."""
    bad = _mismatched(src, dest, sorted(wanted.files))
    if not bad:
        return []
    _unlink(dest / MARKER)
    _copy_all(src, dest, bad, wanted, progress_every)
    still = _mismatched(src, dest, bad)
    if still:
        raise StagingError(f"{dest / still[0]} differs from {src / still[0]} after copying it twice "
                           f"({len(still)} file(s)); check the node-local disk or stage elsewhere")
    return bad


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


def _copy_all(src: Path, dest: Path, rels: Sequence[str], wanted: Listing, progress_every: float) -> int:
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


def _mismatched(src: Path, dest: Path, rels: Sequence[str]) -> List[str]:
    same = _in_batches(lambda rel: _checksum(src / rel) == _checksum(dest / rel), rels)
    return [rel for rel, ok in zip(rels, same) if not ok]


class _Progress:
    """Copy progress through :class:`imagenet.common.terminal.ProgressLine`: a redrawn line on an
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
        return (f"staging: {self.done_files}/{self.files} files, {_human(self.done_bytes)} of "
                f"{_human(self.total)} ({100 * self.done_bytes / max(self.total, 1):.0f}%), "
                f"{_human(rate)}/s, {eta:.0f} s left")

    def close(self) -> None:
        self.line.close()


def _say(message: str) -> None:
    # Every node's copier reports (not only rank 0): each node's copy is its own.
    print(f"=> {socket.gethostname()}: {message}", flush=True)


# ---------------------------------------------------------------- command line

def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m imagenet.staging DATA DIR``: stage ahead of training, e.g. once per node with
    ``srun --ntasks-per-node=1``; prints the copy's folder last. Training with the same
    ``--stage-dir DIR`` then finds the copy complete and reuses it. ``--remove`` removes this
    node's copy instead (after the last job that reads it)."""
    parser = argparse.ArgumentParser(prog="python -m imagenet.staging",
                                     description="Copy a dataset folder to node-local storage (or reuse the copy)")
    parser.add_argument("data", help="dataset folder to copy")
    parser.add_argument("stage_dir", metavar="DIR", help="node-local folder ($VARS are expanded here); the copy "
                                                         "goes into DIR/<user>/, private to you")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--verify", action="store_true", help="also compare checksums with the source")
    action.add_argument("--remove", action="store_true", help="remove this node's copy instead")
    args = parser.parse_args(argv)
    try:
        dest = destination(args.data, expand(args.stage_dir))
        if args.remove:
            return 0 if remove_copy(dest) else 1
        stage(args.data, dest, args.verify)
    except (StagingError, OSError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
