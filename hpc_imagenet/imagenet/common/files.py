"""Writing a file so that a crash leaves the old content or the new, never a torn file.

Every index, marker, record, checkpoint and run.json goes through :func:`atomic_write`: the content
goes to a temp file with a unique name in the same folder (same filesystem, so the rename is
atomic; unique, so two writers never share one), is fsynced, renamed over the target, and the
folder is fsynced so the rename itself survives a power cut. A reader sees either file whole.

Hand-written because the standard library has no such call (``os.replace`` is only the rename);
it is a dozen lines.

Run folders, checkpoints and records often sit on a filesystem that other users share, so what
this module writes is never world-writable and never goes through a planted link:

- Permissions follow the user's umask, less write for others: importing this module adds ``o-w`` to
  the process's umask, so nothing the process creates afterwards (TensorBoard's files and torch's
  included) is world-writable, even under ``umask 0``. Folders are made by :func:`make_dirs` with the
  same mode.
- A file is replaced by a rename of a temp file that ``mkstemp`` created in the same folder with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a name that exists, a link included, is never opened), and the
  rename replaces a symbolic link itself, never the file it points to. The new file takes the old
  one's permissions only from a regular file (``lstat``), never from a link's target.
- :func:`append_line` reads the old lines with ``O_NOFOLLOW``: a records file that is a link is
  refused with one line.
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

NO_WORLD_WRITE = stat.S_IWOTH


def _umask_without_world_write() -> int:
    """The process's umask with o-w added (set so), read once at import: reading it means setting
    it, which is not thread-safe."""
    mask = os.umask(0o022) | NO_WORLD_WRITE
    os.umask(mask)
    return mask


_UMASK = _umask_without_world_write()

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], object], suffix: str = TEMP_SUFFIX,
                 durable: bool = True) -> None:
    """Call WRITE(binary file object) on a temp file next to PATH, fsync it, rename it over PATH and
    fsync the folder. On any error the temp file is removed and PATH is as it was.

    ``durable=False`` skips both fsyncs (the rename still makes the file appear whole or not at
    all): for bulk copies of many files whose completeness a marker declares, written after one
    :func:`sync_all`; two fsyncs per file would make staging a million-file folder take hours."""
    path = Path(path)
    make_dirs(path.parent)
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
    """The replaced regular file's permissions (less write for others), else what open() gives a new
    file: mkstemp's 0600 would hide shards and records from the rest of a group sharing them. A link
    lends nothing: its target may be anyone's file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode):
        return 0o666 & ~_UMASK
    return stat.S_IMODE(info.st_mode) & ~NO_WORLD_WRITE


def make_dirs(folder: PathLike) -> None:
    """Create FOLDER and its missing parents with the umask's permissions, never world-writable
    (``Path.mkdir(parents=True)`` gives parents the bare umask's mode)."""
    missing = []
    folder = Path(folder)
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for part in reversed(missing):
        try:
            os.mkdir(part, 0o777 & ~_UMASK)
        except FileExistsError:
            if not part.is_dir():
                raise


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
    make_dirs(path.parent)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        old = _read_no_link(path)
        if old and not old.endswith(b"\n"):
            old += b"\n"
        write_bytes(path, old + line.encode("utf-8") + b"\n")
    finally:
        os.close(fd)


def _read_no_link(path: Path) -> bytes:
    """PATH's bytes (b"" when it does not exist), never through a symbolic link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return b""
    except OSError as e:
        if os.path.islink(path):
            raise OSError(e.errno, f"{path} is a symbolic link; records are never written through one: "
                                   "remove the link (or pass another file)") from None
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read()


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
