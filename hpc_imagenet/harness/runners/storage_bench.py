"""Storage read throughput seen from the nodes: ``hpc_imagenet.harness.bench scaling --io`` (readers x nodes).

Each point is one batch job (:func:`hpc_imagenet.harness.runners.scaling.storage_points` writes it with
:func:`hpc_imagenet.slurm.generate.render_step`, the training jobs' allocation and
setup) over N nodes with R reader tasks per node. The job lists ``--data`` once (every regular
file, recursively), then ``srun`` starts the readers; reader i of T reads files i, i+T, ... whole,
in 1 MiB chunks, until it has read its share or ``--seconds`` have passed, and writes what it read
and when to ``reader-<i>.json``. The point's record sums them: MB/s and files/s in all
(bytes / (last end - first start)) and per node.

Reading every file's bytes through makes no assumption about the format: an ImageFolder (one
small file per image, so files/s is the open rate the storage sustains) and a folder of tar
shards plus an index (few large files, so MB/s) are read by the same code; the record names the
format (detected, or ``--format-label`` e.g. ``staged-shards``) so the report can compare them.
Cache: with ``--cache evict`` (the default) each reader drops its file's pages from the node's
page cache (``posix_fadvise(DONTNEED)``: no root needed, only these files' clean pages go) just
before reading it, so repeated passes still read from storage; ``--cache as-is`` leaves the cache
alone. Each reader also records ``read_bytes`` from /proc/self/io, the bytes that came from a
block device (0 from the page cache; not counted for network filesystems).

    python -m hpc_imagenet.harness.runners.storage_bench list DATA OUT          # in the job: the file list, once
    python -m hpc_imagenet.harness.runners.storage_bench read OUT --seconds S   # in the job: one reader per srun task
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Dict, List

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.runners.common import proc_io

CHUNK = 1 << 20
FILE_LIST = "files.txt"


# ---------------------------------------------------------------- inside the job

def list_files(data: Path, out: Path) -> int:
    files = sorted(str(Path(d) / f) for d, _, fs in os.walk(data, followlinks=True) for f in fs)
    write_text(out / FILE_LIST, "\n".join(files) + "\n")
    return len(files)


def read_share(out: Path, seconds: float, evict: bool = True) -> dict:
    """This task's share of the listed files, read whole; what was read and when."""
    rank, tasks = int(os.environ.get("SLURM_PROCID", 0)), int(os.environ.get("SLURM_NTASKS", 1))
    files = (out / FILE_LIST).read_text().splitlines()[rank::tasks]
    buf = bytearray(CHUNK)
    n_bytes = n_files = 0
    io0 = proc_io().get("read_bytes", 0)
    start = time.time()
    for path in files:
        with open(path, "rb", buffering=0) as f:
            if evict:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while got := f.readinto(buf):
                n_bytes += got
        n_files += 1
        if time.time() - start > seconds:
            break
    result = {"rank": rank, "tasks": tasks, "node": socket.gethostname(),
              "node_id": int(os.environ.get("SLURM_NODEID", 0)), "files": n_files, "bytes": n_bytes,
              "start": start, "end": time.time(), "share": len(files),
              "storage_bytes": proc_io().get("read_bytes", 0) - io0}
    write_text(out / f"reader-{rank}.json", json.dumps(result))
    return result


# ---------------------------------------------------------------- the sweep side

def data_format(data: Path) -> str:
    """imagefolder (class folders of images) or shards (.tar files), by what the folder holds."""
    if any(data.glob("*.tar")) or any(data.glob("*/*.tar")):
        return "shards"
    return "imagefolder"


def metrics(out: Path, nodes: int, readers_per_node: int) -> Dict[str, float]:
    """The point's numbers from its readers' files; ValueError when any reader left none."""
    got = [json.loads(p.read_text()) for p in sorted(out.glob("reader-*.json"))]
    expected = nodes * readers_per_node
    if len(got) != expected:
        raise ValueError(f"{len(got)} of {expected} readers reported (see the job output)")
    elapsed = max(r["end"] for r in got) - min(r["start"] for r in got)
    total_bytes, total_files = sum(r["bytes"] for r in got), sum(r["files"] for r in got)
    per_node: Dict[str, int] = {}
    for r in got:
        per_node[r["node"]] = per_node.get(r["node"], 0) + r["bytes"]
    return {"elapsed_s": elapsed, "bytes": total_bytes, "files": total_files, "nodes": len(per_node),
            "readers": len(got), "mb_per_s": total_bytes / elapsed / 1e6, "files_per_s": total_files / elapsed,
            "mb_per_s_per_node": total_bytes / elapsed / 1e6 / len(per_node),
            "files_per_s_per_node": total_files / elapsed / len(per_node),
            "min_node_mb_per_s": min(per_node.values()) / elapsed / 1e6,
            "bytes_per_file": total_bytes / max(total_files, 1),
            "storage_mb_per_s": sum(r.get("storage_bytes", 0) for r in got) / elapsed / 1e6,
            "complete": all(r["files"] == r["share"] for r in got)}


def job_body(args: argparse.Namespace, readers: int) -> List[str]:
    return ['"$PYTHON" -m hpc_imagenet.harness.runners.storage_bench list "$DATA" "$LOG_DIR" || exit 2',
            f'srun --ntasks-per-node={readers} --cpus-per-task=1 "$PYTHON" -m '
            f'hpc_imagenet.harness.runners.storage_bench read '
            f'"$LOG_DIR" --seconds {args.seconds:g} --cache {args.cache}']


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpc_imagenet.harness.runners.storage_bench",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("list")
    lp.add_argument("data", type=Path)
    lp.add_argument("out", type=Path)
    rp = sub.add_parser("read")
    rp.add_argument("out", type=Path)
    rp.add_argument("--seconds", type=float, default=30)
    rp.add_argument("--cache", choices=["evict", "as-is"], default="evict")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        if not a.data.is_dir():
            print(f"error: {a.data} is not a folder; pass the dataset root on the shared filesystem", file=sys.stderr)
            return 2
        print(f"{list_files(a.data, a.out)} files under {a.data}")
        return 0
    r = read_share(a.out, a.seconds, evict=a.cache == "evict")
    print(f"reader {r['rank']} on {r['node']}: {r['files']} files, {r['bytes'] / 1e6:.1f} MB in "
          f"{r['end'] - r['start']:.2f} s")
    return 0


if __name__ == "__main__":
    from hpc_imagenet.harness.runners.storage_bench import main  # under its one name, not a copy
    sys.exit(main())
