"""Node-local staging (hpc_imagenet.imagenet.data.staging): a copy is made once, reused when complete, completed when
partial or stale, checked by size (and checksum with --stage-verify), refused with one line when
the disk is too small (a real tmpfs of a few hundred KiB), and made by one process per node."""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data import demo, scan, staging, staging_files
from hpc_imagenet.imagenet.data.staging import MARKER, StagingError, destination, stage
from tests.helpers import BIN, PYTHON, REPO, TINY, child_env, explain, read_run, run, script


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = demo.generate(tmp_path / "imagenet", classes=3, train_per_class=6, val_per_class=2, size=(40, 32))
    (root / "train" / "class_empty").mkdir()  # an empty class folder is still a class
    (root / "val" / "class_empty").mkdir()
    return root


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _dirs(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


def _assert_same(src: Path, dest: Path) -> None:
    copy = _files(dest)
    assert copy.pop(MARKER)
    assert copy == _files(src)
    assert _dirs(dest) == _dirs(src)


def test_copies_once_and_reuses_the_complete_copy(src: Path, tmp_path: Path, capsys) -> None:
    dest = destination(str(src), tmp_path / "stage")
    assert dest.parent == tmp_path / "stage" / staging.user_name() and dest.name.startswith("imagenet-")
    first = stage(str(src), dest)
    _assert_same(src, dest)
    assert not first.reused and first.files == 24 and first.bytes_copied == sum(map(len, _files(src).values()))
    marker = json.loads((dest / MARKER).read_text())
    assert marker["files"] == 24 and "verified" not in marker, "a flag the reuse would trust"
    assert (dest.parent.stat().st_mode & 0o777) == 0o700, "the private folder"
    assert "staged 24 of 24 files" in capsys.readouterr().out

    inode, mtime = (dest / "train" / "class_000").stat().st_ino, (dest / MARKER).stat().st_mtime_ns
    second = stage(str(src), dest)
    assert second.reused and second.bytes_copied == 0
    assert (dest / MARKER).stat().st_mtime_ns == mtime and (dest / "train" / "class_000").stat().st_ino == inode
    assert "reusing the complete staged copy" in capsys.readouterr().out


def test_partial_copy_is_completed_and_leftovers_removed(src: Path, tmp_path: Path) -> None:
    dest = destination(str(src), tmp_path / "stage")
    stage(str(src), dest)
    # what a copy killed half-way leaves: no marker, some files missing, a temporary file
    (dest / MARKER).unlink()
    missing = sorted((dest / "train" / "class_001").iterdir())[:3]
    for path in missing:
        path.unlink()
    (dest / "train" / "class_001" / ("x.JPEG" + staging_files.TMP_SUFFIX)).write_bytes(b"half")
    again = stage(str(src), dest)
    assert not again.reused and again.bytes_copied == sum(len((src / p.relative_to(dest)).read_bytes())
                                                          for p in missing)
    _assert_same(src, dest)


def test_size_mismatch_is_copied_again(src: Path, tmp_path: Path) -> None:
    dest = destination(str(src), tmp_path / "stage")
    stage(str(src), dest)
    victim = next((dest / "val" / "class_002").iterdir())
    with open(victim, "r+b") as f:
        f.truncate(10)  # the marker is still there: only the size check can catch it
    assert not stage(str(src), dest).reused
    _assert_same(src, dest)


def test_changed_source_is_restaged(src: Path, tmp_path: Path) -> None:
    dest = destination(str(src), tmp_path / "stage")
    stage(str(src), dest)
    gone = next((src / "train" / "class_000").iterdir())
    gone.unlink()
    (src / "train" / "class_empty").rmdir()
    (src / "val" / "class_empty").rmdir()
    (src / "train" / "class_000" / "new.JPEG").write_bytes(b"new image")
    assert not stage(str(src), dest).reused
    _assert_same(src, dest)  # the removed image and class folders are gone from the copy too


def test_verify_catches_same_size_corruption(src: Path, tmp_path: Path) -> None:
    dest = destination(str(src), tmp_path / "stage")
    stage(str(src), dest)
    victim = next((dest / "train" / "class_002").iterdir())
    st = victim.stat()
    body = bytearray(victim.read_bytes())
    body[-3] ^= 0xFF
    victim.write_bytes(bytes(body))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before
    assert stage(str(src), dest).reused, "without --stage-verify only sizes and times are compared"
    assert not stage(str(src), dest, verify=True).reused
    _assert_same(src, dest)
    assert stage(str(src), dest, verify=True).reused


def test_progress_lines_on_long_copies(tmp_path: Path, capsys) -> None:
    src = tmp_path / "many"
    src.mkdir()
    for i in range(3 * staging_files.BATCH):
        (src / f"{i:04d}.bin").write_bytes(b"x" * 100)
    stage(str(src), destination(str(src), tmp_path / "stage"), progress_every=0.0)
    lines = [line for line in capsys.readouterr().out.splitlines() if "staging: " in line]
    assert len(lines) == 2, lines  # after the first and second of three batches; the last gives the summary
    assert f"staging: {staging_files.BATCH}/{3 * staging_files.BATCH} files, 6.2 KiB of 18.8 KiB (33%), " in lines[0]


def test_stage_dir_expands_variables_per_process(monkeypatch) -> None:
    monkeypatch.setenv("NODE_SCRATCH", "/scratch/node7")
    assert staging.expand("$NODE_SCRATCH/stage") == Path("/scratch/node7/stage")
    monkeypatch.delenv("NODE_SCRATCH")
    with pytest.raises(StagingError, match=r"\$NODE_SCRATCH is not set on .*; export it or give a plain path"):
        staging.expand("${NODE_SCRATCH}/stage")


def test_stage_dir_inside_the_dataset_is_refused(src: Path) -> None:
    with pytest.raises(StagingError, match="overlap"):
        stage(str(src), destination(str(src), src / "stage"))


@pytest.mark.parametrize("kind", ["folder", "shards"])
def test_rank0s_index_reads_each_ranks_own_copy(kind: str, src: Path, tmp_path: Path) -> None:
    if kind == "shards":
        from hpc_imagenet.imagenet.data import shards

        src = Path(shutil.copytree(src, tmp_path / "folder", ignore=shutil.ignore_patterns("class_empty")))
        shards.convert(str(src), str(tmp_path / "shards"), shard_mb=0.01)
        src = tmp_path / "shards"
    node1, node2 = (destination(str(src), tmp_path / node) for node in ("node1", "node2"))
    stage(str(src), node1)
    stage(str(src), node2)
    classes, index = scan._rebased(scan.scan_dataset(str(node1)), str(node1), str(node2))
    own_classes, own = scan.scan_dataset(str(node2))
    assert classes == own_classes and {k: list(v) for k, v in index.items()} == {k: list(v) for k, v in own.items()}
    assert all(str(node2) in name for v in index.values() for name, _ in v)


# ---------------------------------------------------------------- a full staging disk (real tmpfs)


@contextmanager
def _tmpfs(path: Path, size: int) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _needed(src: Path, block: int) -> int:
    files = [p.stat().st_size for p in src.rglob("*") if p.is_file()]
    dirs = [p for p in src.rglob("*") if p.is_dir()]
    return sum(-(-n // block) * block for n in files) + block * len(dirs)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_space_short_is_one_line_with_both_numbers_and_copies_nothing(src: Path, tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", 64 * 1024) as small:
        dest = destination(str(src), small)
        with pytest.raises(StagingError) as err:
            stage(str(src), dest)
        message = str(err.value)
        assert "\n" not in message
        numbers = re.search(r"needs \S+ \S+ \((\d+) bytes\) in \S+ but \S+ \S+ \((\d+) bytes\) is free", message)
        assert numbers, message
        stats = os.statvfs(small)
        assert int(numbers.group(1)) == _needed(src, stats.f_frsize)
        assert int(numbers.group(2)) == stats.f_bavail * stats.f_frsize < int(numbers.group(1))
        assert "--stage-dir with more room" in message
        assert not dest.exists() or not any(dest.iterdir()), "nothing may be copied"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_disk_just_big_enough_is_enough(src: Path, tmp_path: Path) -> None:
    size = _needed(src, 4096) + 16 * 4096
    with _tmpfs(tmp_path / "fits", size) as fits:
        dest = destination(str(src), fits)
        stage(str(src), dest)
        _assert_same(src, dest)


# ---------------------------------------------------------------- the entry scripts


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_full_staging_disk_under_torchrun_every_rank_exits_with_one_line(src: Path, tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", 64 * 1024) as small:
        proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", "--tee", "3", script("imagenet_ddp.py"),
                    *TINY, "--epochs", "1", "--log-dir", tmp_path / "run", "--stage-dir", small, src], timeout=120)
        assert proc.returncode != 0, explain(proc)
        lines = (proc.stdout + proc.stderr).splitlines()
        errors = {rank: [line.partition(":")[2] for line in lines if line.startswith(f"[default{rank}]:error: ")]
                  for rank in (0, 1)}
        assert all(len(e) == 1 for e in errors.values()), explain(proc)
        assert errors[0] == errors[1] and "not enough space to stage" in errors[0][0], explain(proc)
        assert not [line for line in lines if re.match(r"\[default\d\]:Traceback", line)], explain(proc)
        private = destination(str(src), small).parent
        assert list(small.iterdir()) == [private]
        assert list(private.iterdir()) == [private / f"{destination(str(src), small).name}.lock"]


def test_torchrun_one_copier_per_node_and_both_ranks_train_from_the_copy(src: Path, tmp_path: Path) -> None:
    stage_dir = tmp_path / "node-local"
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"), *TINY,
                "--epochs", "1", "--steps-per-epoch", "1", "--log-dir", tmp_path / "run",
                "--stage-dir", "$STAGE_BASE", "--stage-verify", src],
               env=child_env(STAGE_BASE=str(stage_dir)), timeout=300)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.count("staged 24 of 24 files") == 1, explain(proc)
    _assert_same(src, destination(str(src), stage_dir))
    record = read_run(tmp_path / "run")
    assert record["status"] == "finished" and record["config"]["data"]["root"] == str(src)
    assert record["data_root"] == str(destination(str(src), stage_dir)), "training reads the copy"
    assert record["epochs"][-1]["val_samples"] == 6


def test_a_second_job_on_the_node_waits_for_the_first(src: Path, tmp_path: Path) -> None:
    """While another job holds the node's lock for this copy, the stage command waits, copying
    nothing (a blocking lock, no polling); once the lock is free it stages."""
    dest = destination(str(src), tmp_path / "stage")
    dest.parent.mkdir(parents=True, mode=0o700)
    with open(dest.parent / f"{dest.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first job, copying
        proc = subprocess.Popen([PYTHON, "-m", "hpc_imagenet.imagenet.data.staging", str(src), str(tmp_path / "stage")],
                                cwd=REPO,
                                env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "waiting for another process staging to" in proc.stdout.readline()
        assert not dest.exists()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "staged 24 of 24 files" in out and out.splitlines()[-1] == str(dest), out
    _assert_same(src, dest)


def test_stage_command_fails_with_one_line(tmp_path: Path) -> None:
    proc = run([PYTHON, "-m", "hpc_imagenet.imagenet.data.staging", tmp_path / "nothing", tmp_path / "stage"],
               timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", explain(proc)
    assert proc.stderr == f"error: dataset directory {tmp_path / 'nothing'} does not exist; pass the dataset " \
        "folder to stage\n"


def test_stage_verify_needs_stage_dir() -> None:
    with pytest.raises(config.ConfigError, match="--stage-verify checks a staged copy: add --stage-dir DIR"):
        config.parse(["--stage-verify", "/data"], "nd")


# ---------------------------------------------------------------- --stage-cleanup


def test_stage_cleanup_keeps_the_copy_for_a_stopped_run_and_removes_it_when_the_run_finishes(src: Path,
                                                                                            tmp_path: Path) -> None:
    """A run stopped for a requeue (the stop file the batch scripts write) keeps the node's copy for
    its next start, which reuses it; the run that finishes removes it, leaving the private folder."""
    from hpc_imagenet.imagenet.train.trainer import EXIT_PREEMPTED
    from hpc_imagenet.imagenet.process.preemption import STOP_FILE

    run_dir, stage_dir = tmp_path / "run", tmp_path / "stage"
    dest = destination(str(src), stage_dir)
    args = [script("imagenet_nd.py"), *TINY, "--epochs", "1", "--steps-per-epoch", "3", "-p", "1",
            "--log-dir", run_dir, "--stage-dir", stage_dir, "--stage-cleanup", src]
    run_dir.mkdir()
    (run_dir / STOP_FILE).touch()
    stopped = run([PYTHON, *args], timeout=300)
    assert stopped.returncode == EXIT_PREEMPTED, explain(stopped)
    assert (dest / MARKER).is_file() and "removed the staged copy" not in stopped.stdout, explain(stopped)
    finished = run([PYTHON, *args], timeout=300)
    assert finished.returncode == 0, explain(finished)
    assert "reusing the complete staged copy" in finished.stdout, explain(finished)
    assert "removed the staged copy" in finished.stdout and not dest.exists(), explain(finished)
    assert dest.parent.is_dir()


def test_stage_cleanup_is_the_default_in_shared_memory_only() -> None:
    assert staging.cleanup_wanted(None, "/dev/shm/stage") and staging.cleanup_wanted(None, "/dev/shm")
    assert not staging.cleanup_wanted(None, "/tmp/stage") and not staging.cleanup_wanted(None, "/dev/shmx")
    assert not staging.cleanup_wanted(False, "/dev/shm") and staging.cleanup_wanted(True, "/local/scratch")
    assert config.parse(["--stage-dir", "/dev/shm", "/data"], "nd").data.stage_cleanup is None
    assert config.parse(["--stage-dir", "/x", "--no-stage-cleanup", "/data"], "nd").data.stage_cleanup is False
    with pytest.raises(config.ConfigError, match="--stage-cleanup / --no-stage-cleanup .*: add --stage-dir DIR"):
        config.parse(["--stage-cleanup", "/data"], "nd")
