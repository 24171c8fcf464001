"""What a dataset folder and its staged copy hold: files with their size and whole-second mtime, folders,
and strays (links, special files, files of other owners: never part of a copy). The source is listed
following links (a dataset may be built of them); the copy with ``lstat``, never through a link."""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Set, Tuple

MARKER = ".staged.json"  # written last into a complete copy; never part of its listing


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


def list_source(root: Path) -> Listing:
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


def list_copy(dest: Path) -> Listing:
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
