"""hpc_imagenet.imagenet.common.files on a shared filesystem: what it writes follows the user's umask but is never
world-writable (even under umask 0), and a planted symbolic link is replaced or refused, never
written through. The other user is a real uid (``setpriv``), not a mock."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hpc_imagenet.imagenet.common import files
from tests.helpers import REPO

OTHER_UID = 65534  # nobody


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_replacing_a_link_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("theirs")
    theirs.chmod(0o666)
    ours = tmp_path / "run" / "run.json"
    ours.parent.mkdir()
    ours.symlink_to(theirs)
    files.write_text(ours, "ours")
    assert not ours.is_symlink() and ours.read_text() == "ours"
    assert theirs.read_text() == "theirs", "written through the link"
    assert mode(ours) == 0o666 & ~files._UMASK, "the link's target lent its permissions"


def test_a_replaced_file_keeps_its_mode_less_write_for_others(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text("{}\n")
    path.chmod(0o646)
    files.write_text(path, "{}\n{}\n")
    assert mode(path) == 0o644


def test_append_line_refuses_a_link(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text("secret\n")
    link = tmp_path / "records.jsonl"
    link.symlink_to(theirs)
    with pytest.raises(OSError, match="is a symbolic link; records are never written through one"):
        files.append_line(link, "{}")
    assert link.is_symlink() and theirs.read_text() == "secret\n"


WRITER = """
import os, sys
from pathlib import Path
from hpc_imagenet.imagenet.common import files
root = Path(sys.argv[1])
files.write_text(root / "runs" / "a" / "run.json", "{}")
files.append_line(root / "records" / "r.jsonl", "{}")
os.makedirs(root / "runs" / "a" / "tb")  # what a library (TensorBoard) makes on its own
open(root / "runs" / "a" / "tb" / "events", "w").close()
"""


@pytest.fixture()
def written_under_umask_0():
    """A folder anyone may enter, filled by a process whose umask is 0 (the worst a user may set)."""
    root = Path(tempfile.mkdtemp(prefix="files-umask-"))
    root.chmod(0o755)
    subprocess.run([sys.executable, "-c", WRITER, str(root)], check=True, cwd=REPO, preexec_fn=lambda: os.umask(0),
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    yield root
    shutil.rmtree(root)


def test_nothing_is_world_writable_under_umask_0(written_under_umask_0: Path) -> None:
    made = list(written_under_umask_0.rglob("*"))
    assert len(made) == 7, made  # runs, runs/a, run.json, tb, events, records, r.jsonl
    for path in made:
        assert not mode(path) & stat.S_IWOTH, f"{path} is world-writable ({oct(mode(path))})"
        assert mode(path) & stat.S_IWGRP, f"{path}: the umask (0) lets the group write; it must still"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv for a 2nd uid")
def test_another_user_reads_but_cannot_write(written_under_umask_0: Path) -> None:
    def as_other(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                               "sh", "-c", script], capture_output=True, text=True, cwd=written_under_umask_0)

    assert as_other("cat runs/a/run.json").stdout == "{}"
    for attack in ("echo x > runs/a/run.json", "echo x >> records/r.jsonl", "ln -s /etc/passwd runs/a/x",
                   "mv runs/a/run.json runs/a/y", "echo x > runs/a/tb/events"):
        proc = as_other(attack)
        assert proc.returncode != 0 and "ermission denied" in proc.stderr, f"{attack}: {proc.stderr}"
    assert (written_under_umask_0 / "runs" / "a" / "run.json").read_text() == "{}"
