"""The user's private folder under ``--stage-dir`` (``DIR/<user>``, created 0700): refused with one line when
another user owns it, others can write it, it is a symbolic link, or DIR lets others replace it. Only this
user can then write inside, so nobody else can plant files, links or locks in a copy."""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class StagingError(RuntimeError):
    """The dataset cannot be staged; the message is one line naming the problem and the fix."""


def user_name() -> str:
    """This user's name (the private folder's), or the uid where the node has no name for it."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


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
