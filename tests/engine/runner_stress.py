"""Every multi-process job runner, made to fail by one of its jobs, REPEATS times in one process:
``python -m tests.engine.runner_stress REPEATS DIR``. Prints one line per runner: how many calls
ended with the job's own error. The test (test_job_runners.py) runs it under CPU load with a time
bound: a runner that hangs on a job's error never prints.

The failing jobs are the real ones: the archive check on files whose MD5 is not the published one,
a shard whose images include one that is not an image, and a staging copy one of whose files vanished
from the source (the staging threads).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from hpc_imagenet.imagenet.data import archives, shards, staging_files, staging_listing
from hpc_imagenet.imagenet.data.shards import Job, Options
from hpc_imagenet.imagenet.common.errors import DataError


def archive_check(folder: Path) -> list:
    """Three files under ILSVRC 2012's names, none with its published MD5 (prepare --verify-archives)."""
    paths = []
    for name in archives.MD5:
        (folder / name).write_bytes(name.encode() * 1000)
        paths.append(str(folder / name))
    return paths


def shard_jobs(folder: Path, photo: Path) -> list:
    """Four one-image shards, the third of which holds a file that is not an image."""
    bad = folder / "bad.JPEG"
    bad.write_bytes(b"not an image")
    sources = [photo, photo, bad, photo]
    return [Job(str(folder), f"train-{i:06d}.tar", ((str(src), 0, f"{i:08d}"),), Options())
            for i, src in enumerate(sources)]


def copy_source(folder: Path):
    """A folder of small files to stage, and a listing that also names one it lacks (its copy
    raises on one of the copying threads while the others copy)."""
    folder.mkdir()
    rels = [f"{i:04d}.bin" for i in range(2 * staging_files.BATCH)]
    for rel in rels:
        (folder / rel).write_bytes(b"x" * 100)
    rels.insert(staging_files.BATCH + 5, "gone.bin")
    return folder, rels, staging_listing.Listing({rel: (100, 0) for rel in rels}, set())


def raises(call, expected: str) -> bool:
    try:
        out = call()
        if hasattr(out, "__next__"):  # a runner's results, made as they are read
            list(out)
    except (DataError, OSError) as e:
        return expected in str(e)
    return False


def main(argv) -> int:
    repeats, root = int(argv[0]), Path(argv[1])
    photo = next((root / "photos").rglob("*.JPEG"))
    many, rels, listing = copy_source(root / "many")
    checks = {
        "archive check": lambda i: raises(lambda: shards.run_jobs(archive_check(root / f"md5-{i}"), 2,
                                                                  archives.check_md5), "not the published"),
        "shards": lambda i: raises(lambda: shards.run_jobs(shard_jobs(root / f"shards-{i}", photo), 2,
                                                           shards.write_shard), "cannot read image"),
        "staging threads": lambda i: raises(
            lambda: staging_files.copy_all(many, root / f"copy-{i}", rels, listing, 3600.0), "gone.bin"),
    }
    for name, check in checks.items():
        passed, t0 = 0, time.monotonic()
        for i in range(repeats):
            for sub in ("md5", "shards"):
                (root / f"{sub}-{i}").mkdir(exist_ok=True)
            passed += check(i)
        print(f"{name}: {passed}/{repeats}", flush=True)
        print(f"{name}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
