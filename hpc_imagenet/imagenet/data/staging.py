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
import hashlib
import os
import re
import socket
import sys
from pathlib import Path
from typing import Optional, Sequence

from hpc_imagenet.imagenet.common.errors import one_line
from hpc_imagenet.imagenet.data.staging_files import say
from hpc_imagenet.imagenet.data.staging_folder import StagingError, user_name
from hpc_imagenet.imagenet.data.staging_listing import MARKER
from hpc_imagenet.imagenet.data.staging_node import remove_copy, stage

__all__ = ["MARKER", "StagingError", "cleanup_wanted", "destination", "expand", "main", "release_data",
           "remove_copy", "stage", "stage_data", "user_name"]

SHARED_MEMORY = "/dev/shm"  # a copy here holds the node's memory: removed after the job by default


# ---------------------------------------------------------------- entry points for the engine

def stage_data(cfg, info) -> str:
    """The folder training reads (CFG: the settings' data section): its root, or the root's node-local
    copy with --stage-dir (a collective)."""
    if cfg.dummy or not cfg.stage_dir:
        return cfg.root
    from hpc_imagenet.imagenet.process import group  # here, not at the top: the command line below runs without torch

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
    from hpc_imagenet.imagenet.process import group  # here, not at the top: the command line below runs without torch

    # Every process of the job has finished reading the copy. Each node decides for itself after
    # the wait ('$TMPDIR' may be /dev/shm on one node only): every rank must reach the collective.
    group.all_gather_object(None)
    if (info.local_rank == 0 or not group.initialized()) and cleanup_wanted(cfg.stage_cleanup, cfg.stage_dir):
        dest = destination(cfg.root, expand(cfg.stage_dir))
        try:
            remove_copy(dest)
        except (StagingError, OSError) as e:
            say(f"warning: the staged copy {dest} was not removed: {one_line(e)}")


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


def destination(source: str, stage_dir: Path) -> Path:
    """STAGE_DIR/<user>/<source folder name>-<hash of its absolute path>: two datasets never share a
    copy, and two users never share a folder. STAGE_DIR is resolved; the rest never is (a link
    there is refused, not followed)."""
    src = Path(source).resolve()
    tag = hashlib.sha256(str(src).encode()).hexdigest()[:8]
    return stage_dir.resolve() / user_name() / f"{src.name or 'data'}-{tag}"


# ---------------------------------------------------------------- command line

def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hpc_imagenet.imagenet.data.staging DATA DIR``: stage ahead of training, e.g. once per node with
    ``srun --ntasks-per-node=1``; prints the copy's folder last. Training with the same
    ``--stage-dir DIR`` then finds the copy complete and reuses it. ``--remove`` removes this
    node's copy instead (after the last job that reads it)."""
    parser = argparse.ArgumentParser(prog="python -m hpc_imagenet.imagenet.data.staging",
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
    from hpc_imagenet.imagenet.data.staging import main  # under its one name, not a copy
    sys.exit(main())
