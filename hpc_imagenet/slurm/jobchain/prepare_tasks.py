"""The prepare stages, inside their jobs: plan, convert (one array task's share), check.

They split ``python -m hpc_imagenet.imagenet.data.prepare`` over a job array and produce the very same output: the same
scan (:func:`hpc_imagenet.imagenet.data.prepare.scan`), the same shards' plan (``plan_split``, ``.shards-plan.json``),
the same shard writer, and the same index, written last by ``write_splits`` once every shard is there.

- ``plan`` indexes the archives (headers only) once and keeps the samples in ``jobs/plan.json``, so
  no task scans again; it also fixes the output's ``.shards-plan.json``, before any task writes.
- ``convert TASK N`` writes shards TASK, TASK+N, TASK+2N... of the plan, in order: a shard already
  there is kept (read back, not converted again), a killed writer's temp file of its own shards is
  removed first.
- ``check`` refuses to index an incomplete output (it names the missing shards), writes the index,
  decodes every sample (``hpc_imagenet.imagenet.data.shards.verify``) and writes ``SHA256SUMS`` of the shards.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import DEFAULT_SHARD_MB, archives, prepare, shards, sources
from hpc_imagenet.imagenet.data.shards import Member, Options

from hpc_imagenet.slurm.jobchain.state import Layout

CHECKSUMS = "SHA256SUMS"


def plan(layout: Layout, archive_dir: Path, workers: int, shard_mb: float = DEFAULT_SHARD_MB) -> dict:
    """Scan the archives, keep the samples and fix the conversion's plan; returns counts."""
    classes, names, samples = prepare.scan(archives.find(str(archive_dir)), workers)
    doc = {"archives": str(archive_dir), "shard_mb": shard_mb, "classes": classes, "names": names,
           "samples": {split: [[*member, target, nbytes] for member, target, nbytes in rows]
                       for split, rows in samples.items()}}
    files.write_text(layout.plan, json.dumps(doc))
    jobs = _jobs(layout, doc)
    layout.data.mkdir(parents=True, exist_ok=True)
    shards.check_plan(layout.data, shards.plan_fingerprint(str(archive_dir), jobs, Options()))
    counts = {"classes": len(classes), "shards": sum(len(j) for j in jobs.values()),
              **{f"{s}_samples": len(samples[s]) for s in sources.SPLITS}}
    return {**counts, "detail": f"{counts['classes']} classes, {counts['train_samples']} training and "
                                f"{counts['val_samples']} validation images in {counts['shards']} shards"}


def _read_plan(layout: Layout) -> dict:
    try:
        return json.loads(layout.plan.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read the plan {layout.plan} ({e}); run the chain again from its plan stage") from None


def _samples(doc: dict) -> Dict[str, List[Tuple[Member, int, int]]]:
    return {split: [(Member(*row[:4]), row[4], row[5]) for row in rows] for split, rows in doc["samples"].items()}


def _jobs(layout: Layout, doc: dict) -> Dict[str, List[shards.Job]]:
    """The shards of the plan, per split: what write_splits plans for the same samples."""
    samples = _samples(doc)
    return {s: shards.plan_split(s, samples[s], int(doc["shard_mb"] * 2**20), str(layout.data), Options())
            for s in sources.SPLITS}


def all_jobs(layout: Layout) -> List[shards.Job]:
    jobs = _jobs(layout, _read_plan(layout))
    return [job for split in sources.SPLITS for job in jobs[split]]


def convert(layout: Layout, task: int, tasks: int, workers: int) -> dict:
    """Write this task's shards that are not there yet; returns what was written and what was kept."""
    mine = all_jobs(layout)[task::tasks]
    for stale in files.stale_temps(layout.data):  # a killed writer's, of this task's shards only
        if any(stale.name.startswith(f".{job.name}.") for job in mine):
            stale.unlink(missing_ok=True)
    todo = [job.name for job in mine if not os.path.exists(os.path.join(job.dst, job.name))]
    # every shard of the task, in order: write_shard writes a missing one and reads each back (a kept
    # shard that is not a whole tar stops the task with a one-line error rather than reaching the index)
    for _ in shards.run_jobs(mine, workers, shards.write_shard):
        pass
    return {"shards": len(mine), "written": len(todo), "kept": len(mine) - len(todo), "written_names": todo}


def check(layout: Layout, workers: int) -> dict:
    """Index a complete output, decode every sample, write the checksums; returns the counts."""
    doc = _read_plan(layout)
    jobs = all_jobs(layout)
    missing = [job.name for job in jobs if not (layout.data / job.name).is_file()]
    if missing:
        raise DataError(f"{len(missing)} of {len(jobs)} shards are missing (first {missing[0]}): a prepare task did "
                        "not finish; run the same jobchain submit command again to finish them")
    counts = shards.write_splits(doc["archives"], str(layout.data), doc["classes"], _samples(doc), doc["shard_mb"],
                                 workers, Options(), doc["names"])
    planned = {f"{s}_samples": len(doc["samples"][s]) for s in sources.SPLITS}
    if any(counts[k] != v for k, v in planned.items()):
        raise DataError(f"the shards hold {counts} samples but the plan has {planned}; delete {layout.data} and run "
                        "the chain again")
    counts["verified"] = shards.verify(str(layout.data), workers)
    counts["detail"] = f"{counts['verified']} samples decode; the index and {CHECKSUMS} written"
    sums = list(shards.run_jobs([str(layout.data / job.name) for job in jobs], workers, _sha256))
    files.write_text(layout.data / CHECKSUMS, "".join(f"{digest}  {os.path.basename(path)}\n" for path, digest in sums))
    return counts


def _sha256(path: str) -> Tuple[str, str]:
    with open(path, "rb") as f:
        return path, hashlib.file_digest(f, "sha256").hexdigest()
