"""Report section "Data at scale": shards vs ImageFolder, from ``python -m hpc_imagenet.harness.bench shards`` records.

Everything shown is a recorded number or arithmetic on recorded numbers.
"""
from __future__ import annotations

from typing import Sequence

from hpc_imagenet.imagenet.data import DEFAULT_SHARD_MB
from hpc_imagenet.harness.core.kinds import DATA_OPENS, INDEX_MEMORY, DataOpensMetrics, Record
from hpc_imagenet.harness.core.records import by_kind, newest_sweep
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES
from hpc_imagenet.harness.report.common import Page, md_table, mib, prose

TARGETS = {"fast+shards": 2.0, "fast+shards-max320": 3.0}  # per-core goals vs the baseline (train split)
SHARD_MB = DEFAULT_SHARD_MB  # the converter's default --shard-size


PIPELINE_COLUMNS = ("variant (backend+source)", "split", "workers", "images", "rounds", "CPU ms/image",
                    "images/s per core", "ratio vs baseline on the folder (median of rounds)", "ratio range", "target",
                    "host load (1 min)", "record")


def pipeline_table(rows: Sequence[dict]) -> str:
    out = []
    for r in sorted(rows, key=lambda r: (r.point.split, r.point.workers, r.point.variant)):
        m, p = r.metrics, r.point
        target = TARGETS.get(p.variant) if p.split == "train" else None
        ratio = m.ratio_per_core
        out.append([p.variant, p.split, p.workers, p.images, m.rounds, m.cpu_ms_per_image,
                    m.images_per_cpu_s, f"{ratio:.2f}x" if ratio else "-",
                    f"{m.ratio_min:.2f}-{m.ratio_max:.2f}" if m.ratio_min else "-",
                    "-" if target is None else f"{target:.0f}x: {'met' if ratio and ratio >= target else 'not met'}",
                    r.host_load_1m, r.source])
    return md_table(PIPELINE_COLUMNS, out)


def per_image_budget(rows: Sequence[dict]) -> str:
    """Where the CPU time per image goes for shards of the original bytes against the 2x goal, in the
    records' own numbers (the margin, or the shortfall and what it would have to come from)."""
    train = {r.point.variant: r.metrics for r in rows
             if r.point.split == "train" and r.point.workers == 0}
    base, folder, shard = train.get("baseline"), train.get("fast+folder"), train.get("fast+shards")
    if not (base and folder and shard):
        return ""
    goal = base.cpu_ms_per_image / TARGETS["fast+shards"]
    gap = shard.cpu_ms_per_image - goal
    verdict = prose("data_scale.budget_met" if gap <= 0 else "data_scale.budget_short", goal=goal, gap=gap,
                    spare=-gap)
    return prose("data_scale.budget", base=base, folder=folder, shard=shard, verdict=verdict,
                 saved=folder.cpu_ms_per_image - shard.cpu_ms_per_image) + "\n"


OPENS_COLUMNS = ("source", "loader workers", "epochs", "images read (all epochs)",
                 "files opened under the data folder (strace, all processes)", "processes that opened one",
                 "most opens of one file by one process", "files opened (dataset counter, workers 0)", "shard files",
                 "MB read per epoch (rchar)", "read syscalls", "record")


def opens_table(rows: Sequence[dict]) -> str:
    out = []
    for r in sorted(rows, key=lambda r: r.point.source):
        m, p = r.metrics, r.point
        epochs = m.epochs or 1  # records before the seeded multi-epoch run: one epoch
        out.append([p.source, p.workers, epochs, m.images, m.opens, m.opening_processes,
                    m.max_opens_per_file, m.dataset_opens, m.shards,
                    m.rchar / 1e6 / epochs, m.syscr, r.source])
    text = md_table(OPENS_COLUMNS, out)
    by = {r.point.source: r.metrics for r in rows}
    folder, shards = by.get("folder"), by.get("shards")
    if folder and shards and shards.opens and folder.opens:
        text += prose("data_scale.fewer", folder=folder, shards=shards, ratio=folder.opens / shards.opens) + "\n"
        text += at_scale(folder, shards)
    return text


# What the ImageNet-scale figure assumes (none of it is measured here; each is a common setting).
SCALE_RANKS_PER_NODE = 8    # GPUs per node
SCALE_WORKERS = 8           # --workers per rank
SCALE_EPOCHS = 90           # --epochs default (pytorch/examples' ResNet schedule)
SCALE_NODES = (1, 2, 4, 8)  # 8 nodes = the seed's 64-GPU runs
TARGET_FEWER = 1000         # goal: 1,000x fewer opens per epoch and node


AT_SCALE_COLUMNS = ("nodes", "GPUs (ranks)", "ImageFolder: opens per node per epoch",
                    "shards: opens per node per epoch (run average)", "fewer opens", "{target_fewer:,}x target",
                    "smallest shard size for {target_fewer:,}x (MB)")


def at_scale(folder: DataOpensMetrics, shards: DataOpensMetrics) -> str:
    """Opens per epoch and node at ImageNet scale, from the measured image size and opens per process."""
    mean = folder.rchar / folder.images
    n_shards = -(-IMAGENET_TRAIN_IMAGES * mean // (SHARD_MB * 2**20))
    procs = SCALE_RANKS_PER_NODE * SCALE_WORKERS
    per_node_run = procs * n_shards + SCALE_RANKS_PER_NODE  # + each rank's one open of the index
    shard_epoch = per_node_run / SCALE_EPOCHS
    rows = []
    for nodes in SCALE_NODES:
        folder_epoch = IMAGENET_TRAIN_IMAGES / nodes
        fewer = folder_epoch / shard_epoch
        needed_mb = mean * TARGET_FEWER * nodes * procs / SCALE_EPOCHS / 2**20  # total bytes / shards allowed
        rows.append([nodes, nodes * SCALE_RANKS_PER_NODE, folder_epoch, shard_epoch, f"{fewer:.0f}x",
                     "met" if fewer >= TARGET_FEWER else "not met", round(needed_mb)])
    return prose("data_scale.at_scale", shards=shards, epochs=shards.epochs or 1, images=IMAGENET_TRAIN_IMAGES,
                 kb=mean / 1e3, shard_mb=SHARD_MB, n_shards=n_shards, ranks=SCALE_RANKS_PER_NODE, workers=SCALE_WORKERS,
                 per_node_run=per_node_run, shard_epoch=shard_epoch, epochs_run=SCALE_EPOCHS,
                 table=md_table(AT_SCALE_COLUMNS, rows, target_fewer=TARGET_FEWER))


MEMORY_COLUMNS = ("index", "samples", "rank: MiB for the index", "rank RSS MiB", "loader workers",
                  "per worker: private MiB (copy-on-write)", "per worker: PSS MiB", "per worker: RSS MiB", "record")


def memory_table(rows: Sequence[dict]) -> str:
    out = [[r.point.index, r.point.samples, mib(r.metrics.rank_index_bytes),
            mib(r.metrics.rank_rss_bytes), r.metrics.workers, mib(r.metrics.worker_private_bytes),
            mib(r.metrics.worker_pss_bytes), mib(r.metrics.worker_rss_bytes), r.source]
           for r in sorted(rows, key=lambda r: ["list", "folder", "shards"].index(r.point.index))]
    return md_table(MEMORY_COLUMNS, out)


def shards_pipeline(recs: Sequence[Record]) -> list:
    """The shards bench's pipeline points: each names its source and backend (``variant``)."""
    return [r for r in by_kind(recs, "pipeline") if r.point.variant]


def section(recs: Sequence[Record]) -> str:
    pipe = newest_sweep(shards_pipeline(recs))
    opens, mem = (newest_sweep(by_kind(recs, k.name)) for k in (DATA_OPENS, INDEX_MEMORY))
    if not (pipe or opens or mem):
        return "## Data at scale: shards\n\n_(no records yet: run `python -m hpc_imagenet.harness.bench shards`)_\n"
    return prose("data_scale.section", pipeline=pipeline_table(pipe) + per_image_budget(pipe),
                 opens=opens_table(opens), memory=memory_table(mem))


def draw(recs: Sequence[Record], page: Page) -> str:
    """The shards section, where the tag holds a shards bench's records."""
    wanted = shards_pipeline(recs) or any(r.kind in (DATA_OPENS.name, INDEX_MEMORY.name) for r in recs)
    return section(recs) if wanted else ""
