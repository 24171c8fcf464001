"""Node-local staging on a shared node, with two real users: the job's (uid 4242) and another's
(uid 65534, nobody), each run with setpriv. Both run the torch-free staging command (or a few lines
of Python) with the system's python3 from this checkout: root's virtual environment is not readable
by other uids.

The stage folder is a sticky, world-writable folder like /dev/shm or /tmp. Checked: what the other
user plants (a link or a folder in place of the job's private folder, a fake complete copy with
changed images of the same sizes and times, a lock file, links) harms nothing and is refused or
ignored with one line; the private folder is 0700 and nobody else can write into it; a link inside
the copy is removed, never followed; cleanup removes the copy only when no other job reads it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from hpc_imagenet.imagenet.data import demo, staging
from tests.helpers import REPO, explain

USER, OTHER = 4242, 65534  # the job's user, and someone else on the node
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="switching between two uids needs root"),
              pytest.mark.skipif(not (shutil.which("setpriv") and os.path.exists(SYSTEM_PYTHON)),
                                 reason="needs setpriv and the system python3")]


def as_user(uid: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """ARGS run by SYSTEM_PYTHON as UID (own group, no other groups), importing this checkout."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", SYSTEM_PYTHON,
                           *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def stage_as(uid: int, data: Path, stage_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return as_user(uid, "-m", "hpc_imagenet.imagenet.data.staging", data, stage_dir, *extra)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and proc.stdout == "", explain(proc)
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: "), explain(proc)
    return line


@pytest.fixture
def node() -> Iterator[Path]:
    """A node's shared scratch: DIR (mode 1777, as /dev/shm), the dataset (readable by all) and the
    job user's own folder holding a file that must survive everything."""
    root = Path(tempfile.mkdtemp(prefix="staging-users-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        demo.generate(root / "data", classes=2, train_per_class=3, val_per_class=1, size=(24, 16))
        for path in [root / "data", *(root / "data").rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        (root / "shm").mkdir(mode=0o1777)
        os.chmod(root / "shm", 0o1777)
        home = root / "home"
        home.mkdir()
        (home / "thesis.txt").write_text("years of work")
        os.chown(home, USER, USER)
        os.chown(home / "thesis.txt", USER, USER)
        yield root
    finally:
        shutil.rmtree(root)


def _data(node: Path) -> Path:
    return node / "data"


def _copy_name(node: Path) -> str:
    return staging.destination(str(_data(node)), node / "shm").name


def _thesis_intact(node: Path) -> None:
    assert (node / "home" / "thesis.txt").read_text() == "years of work"


PLANT_FAKE_COPY = """
import json, os, sys
from pathlib import Path
from hpc_imagenet.imagenet.data import staging, staging_listing, staging_node
data, folder = Path(sys.argv[1]), Path(sys.argv[2])
os.makedirs(folder, exist_ok=True)
os.chmod(folder, 0o777)
copy = folder / sys.argv[3]
for path in sorted(data.rglob("*")):
    target = copy / path.relative_to(data)
    if path.is_dir():
        target.mkdir(parents=True)
        continue
    body = bytearray(path.read_bytes())
    body[len(body) // 2] ^= 0xFF  # a changed image: same size, same time
    target.write_bytes(bytes(body))
    st = path.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
listing = staging_listing.list_source(data)
(copy / staging.MARKER).write_text(json.dumps({"format": staging_node.FORMAT, "listing": listing.digest()}))
(folder / (sys.argv[3] + ".lock")).write_text("")
os.symlink(sys.argv[4], copy / "train" / "thesis-link")
"""


def test_another_users_folder_in_place_of_the_private_one_is_refused(node: Path) -> None:
    """The other user makes DIR/<job user>/ first, with a complete-looking copy of changed images
    (same sizes and times, a marker that matches), a lock file and a link to the job user's files."""
    data, shm = _data(node), node / "shm"
    private = shm / str(USER)
    planted = as_user(OTHER, "-c", PLANT_FAKE_COPY, data, private, _copy_name(node), node / "home")
    assert planted.returncode == 0, explain(planted)
    for extra in ((), ("--verify",)):
        line = one_error_line(stage_as(USER, data, shm, *extra))
        assert f"the stage folder {private} belongs to nobody (uid {OTHER}), not to you ({USER})" in line
        assert "pass another --stage-dir" in line
    _thesis_intact(node)
    assert (private / _copy_name(node) / "train" / "thesis-link").is_symlink(), "nothing of theirs touched either"


def test_a_link_in_place_of_the_private_folder_is_refused_and_not_followed(node: Path) -> None:
    shm = node / "shm"
    planted = as_user(OTHER, "-c", "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", node / "home",
                      shm / str(USER))
    assert planted.returncode == 0, explain(planted)
    line = one_error_line(stage_as(USER, _data(node), shm))
    assert f"the stage folder {shm / str(USER)} is a symbolic link (to {node / 'home'})" in line
    assert sorted(p.name for p in (node / "home").iterdir()) == ["thesis.txt"], "nothing written through it"
    _thesis_intact(node)


def test_the_private_folder_is_the_users_alone_and_what_others_plant_beside_it_is_ignored(node: Path) -> None:
    data, shm = _data(node), node / "shm"
    name = _copy_name(node)
    # the old, predictable places: a link where a shared copy would have been, and a lock beside it
    planted = as_user(OTHER, "-c", "import os, sys; os.symlink(sys.argv[1], sys.argv[2]); "
                      "open(sys.argv[3], 'w').close()", node / "home", shm / name, shm / f"{name}.lock")
    assert planted.returncode == 0, explain(planted)
    proc = stage_as(USER, data, shm)
    assert proc.returncode == 0, explain(proc)
    dest = Path(proc.stdout.splitlines()[-1])
    assert dest == shm / str(USER) / name
    st = os.lstat(dest.parent)
    assert (st.st_uid, st.st_mode & 0o777) == (USER, 0o700)
    assert os.lstat(dest.parent / f"{name}.lock").st_uid == USER, "the lock lives in the private folder"
    # nobody else can plant anything in it: not a changed image, not a link, not a lock
    victim = next(dest.rglob("*.JPEG"))
    attempts = as_user(OTHER, "-c", """
import os, sys
for attempt in (lambda: open(sys.argv[1], "r+b"), lambda: os.symlink("/", sys.argv[2]),
                lambda: open(sys.argv[3], "w")):
    try:
        attempt()
        print("planted")
    except PermissionError:
        print("denied")
""", victim, dest / "train" / "link", dest.parent / "other.lock")
    assert attempts.stdout.split() == ["denied"] * 3, explain(attempts)
    again = stage_as(USER, data, shm, "--verify")
    assert again.returncode == 0 and "reusing the complete staged copy" in again.stdout, explain(again)
    assert (shm / name).is_symlink() and (shm / f"{name}.lock").exists(), "the other user's files are left alone"
    _thesis_intact(node)


def test_a_private_folder_others_can_write_or_a_stage_dir_others_control_is_refused(node: Path) -> None:
    data, shm = _data(node), node / "shm"
    assert stage_as(USER, data, shm).returncode == 0
    assert as_user(USER, "-c", "import os, sys; os.chmod(sys.argv[1], 0o777)", shm / str(USER)).returncode == 0
    line = one_error_line(stage_as(USER, data, shm))
    assert f"the stage folder {shm / str(USER)} can be written by other users (mode 0777); run chmod 700" in line
    open_dir = node / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    line = one_error_line(stage_as(USER, data, open_dir))
    assert f"--stage-dir {open_dir} can be written by other users and has no sticky bit" in line
    assert "chmod +t" in line and list(open_dir.iterdir()) == []
    theirs = node / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER, OTHER)
    assert stage_as(OTHER, data, theirs).returncode == 0, "their own folder is fine for them"
    line = one_error_line(stage_as(USER, data, theirs))
    assert f"--stage-dir {theirs} belongs to nobody (uid {OTHER}), who could replace your folder" in line


def test_a_link_inside_the_copy_is_removed_never_followed(node: Path) -> None:
    """A link in the copy (however it got there) is an entry the source lacks: removed as a link.
    The old listing followed it and deleted the files it pointed to as extra files."""
    data, shm = _data(node), node / "shm"
    dest = Path(stage_as(USER, data, shm).stdout.splitlines()[-1])
    link = dest / "train" / "not-a-class"
    as_user(USER, "-c", "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", node / "home", link)
    # a link in place of a class folder, pointing at the user's files: their names are "extra" there
    cls = next(p for p in (dest / "train").iterdir() if p.is_dir() and not p.is_symlink())
    swap = ("import os, shutil, sys; shutil.rmtree(sys.argv[2]); os.symlink(sys.argv[1], sys.argv[2])")
    assert as_user(USER, "-c", swap, node / "home", cls).returncode == 0
    proc = stage_as(USER, data, shm)
    assert proc.returncode == 0, explain(proc)
    assert not link.is_symlink() and not link.exists() and cls.is_dir() and not cls.is_symlink()
    assert sorted(p.name for p in cls.iterdir()) == sorted(p.name for p in (data / "train" / cls.name).iterdir())
    _thesis_intact(node)


HOLD = """
import sys
from pathlib import Path
from hpc_imagenet.imagenet.data import staging
staging.stage(sys.argv[1], Path(sys.argv[2]), hold=True)
print("holding", flush=True)
sys.stdin.readline()
"""


def test_cleanup_leaves_a_copy_another_job_reads_and_removes_it_after(node: Path) -> None:
    data, shm = _data(node), node / "shm"
    dest = staging.destination(str(data), shm)
    private = shm / str(USER)
    private.mkdir(mode=0o700)
    os.chown(private, USER, USER)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/nonexistent"}
    other_job = subprocess.Popen(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", SYSTEM_PYTHON,
                                  "-c", HOLD, str(data), str(private / dest.name)], cwd=REPO, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for line in other_job.stdout:  # its staging lines, then "holding": it now reads the copy
            if line.strip() == "holding":
                break
        else:
            pytest.fail("the other job ended before it held the copy")
        first = as_user(USER, "-m", "hpc_imagenet.imagenet.data.staging", "--remove", data, shm)
        assert first.returncode == 1 and "another job on this node is reading it" in first.stdout, explain(first)
        assert (private / dest.name / staging.MARKER).is_file()
    finally:
        other_job.communicate("done\n", timeout=60)
    second = as_user(USER, "-m", "hpc_imagenet.imagenet.data.staging", "--remove", data, shm)
    assert second.returncode == 0 and "removed the staged copy" in second.stdout, explain(second)
    assert not (private / dest.name).exists()
