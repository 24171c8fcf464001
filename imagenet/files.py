"""Writing a file so that a crash leaves the old content or the new, never a torn file.

Every index, marker, record, checkpoint and run.json goes through :func:`atomic_write`: the content
goes to a temp file with a unique name in the same folder (same filesystem, so the rename is
atomic; unique, so two writers never share one), is fsynced, renamed over the target, and the
folder is fsynced so the rename itself survives a power cut. A reader sees either file whole.

Hand-written because the standard library has no such call (``os.replace`` is only the rename);
it is a dozen lines.
"""
from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator, Union

TEMP_SUFFIX = ".tmp"

# The process's umask, read once at import (reading it means setting it, which is not thread-safe).
_UMASK = os.umask(0o022)
os.umask(_UMASK)

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], object], suffix: str = TEMP_SUFFIX,
                 durable: bool = True) -> None:
    """Call WRITE(binary file object) on a temp file next to PATH, fsync it, rename it over PATH and
    fsync the folder. On any error the temp file is removed and PATH is as it was.

    ``durable=False`` skips both fsyncs (the rename still makes the file appear whole or not at
    all): for bulk copies of many files whose completeness a marker declares, written after one
    :func:`sync_all`; two fsyncs per file would make staging a million-file folder take hours."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, _mode(path))
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def sync_all() -> None:
    """Flush every written file to its disk (sync(2)): once before a marker that vouches for many
    files written with ``durable=False``."""
    os.sync()


def _mode(path: Path) -> int:
    """The replaced file's permissions, else what open() would give a new file: mkstemp's 0600
    would hide shards and records from the rest of a group sharing them."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_UMASK


def write_bytes(path: PathLike, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def write_text(path: PathLike, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: PathLike, data: object, indent: int = 2) -> None:
    write_text(path, json.dumps(data, indent=indent, default=str))


def append_line(path: PathLike, line: str) -> None:
    """Add LINE (no newline) at the end of a line-per-record file, atomically: the file is read and
    rewritten whole (records files are small), under an exclusive lock on its folder so that two
    processes appending at once both keep their line. An O_APPEND write could leave a torn last
    line on a crash; this never does."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        old = path.read_bytes() if path.exists() else b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        write_bytes(path, old + line.encode("utf-8") + b"\n")
    finally:
        os.close(fd)


def stale_temps(folder: PathLike, suffix: str = TEMP_SUFFIX) -> Iterator[Path]:
    """Temp files a killed writer left in FOLDER: every file named ...SUFFIX (as :func:`atomic_write`
    names them, and as writers before it did), so only for folders where no other file ends so."""
    for entry in os.scandir(folder):
        if entry.is_file() and entry.name.endswith(suffix):
            yield Path(entry.path)


def fsync_dir(folder: PathLike) -> None:
    """fsync a folder, so that a rename in it is on disk; silently skipped where a folder cannot be
    opened for it (some network filesystems)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
