"""The one-off benches' write-up (``studies/benches/RESULTS.md``), one section each: overlap, region decoding,
the import of ImageNet's archives, and Apex's AMP against torch's (from the harness's GPU records)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hpc_imagenet.imagenet.common.files import write_text
from hpc_imagenet.harness.analysis.comparisons import times
from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import Environments, md_table
from studies.benches import HERE, RECORDS, amp_parity, prepare_section, words


OVERLAP_COLUMNS = ("model", "image size", "batch/proc", "processes", "bucket (MB)", "gradient",
                   "step ms (all-reduce)", "step ms (no all-reduce)", "exposed ms", "all-reduce alone ms", "hidden",
                   "host load (1 min)", "env", "record")


def overlap_section(recs: Sequence[Record], env: Environments) -> str:
    """Exposed all-reduce per DDP step (:mod:`studies.benches.overlap`), one row per record."""
    rows = [[p.arch, p.image_size, p.batch_size, p.world_size, p.bucket_cap_mb, figures.size_label(m.grad_bytes),
             m.step_time_ms, m.step_no_allreduce_ms, m.exposed_comm_ms, m.allreduce_alone_ms,
             f"{100 * m.hidden_fraction:.0f}%", r.host_load_1m, env.id(r), r.source]
            for r in sorted(recs, key=lambda r: (r.sweep, r.point.world_size, r.point.bucket_cap_mb))
            for p, m in [(r.point, r.metrics)]]
    return words("overlap.section", table=md_table(OVERLAP_COLUMNS, rows)) if rows else ""


REGION_COLUMNS = ("decoder", "images", "rounds", "images per CPU second", "CPU ms per image", "vs the C region decoder",
                  "host load (1 min)", "env", "record")


def region_section(recs: Sequence[Record], env: Environments) -> str:
    """Decoding a crop box per core, each decoder against the C region decoder (:mod:`studies.benches.region`)."""
    rows = [[r.point.decoder, r.point.images, r.metrics.rounds, r.metrics.images_per_cpu_s, r.metrics.cpu_ms_per_image,
             times(r.metrics.ratio_per_core), r.host_load_1m, env.id(r), r.source] for r in recs]
    return words("region.section", table=md_table(REGION_COLUMNS, rows)) if rows else ""


def build(record_paths: Sequence[Path] = (RECORDS, records.RECORDS_DIR), out_dir: Path = HERE) -> Path:
    """Write OUT_DIR/RESULTS.md from this study's records (and the harness's, for the AMP runs)."""
    recs = records.load_typed(list(record_paths))[0]
    env = Environments()
    body = [overlap_section(by_kind(recs, "overlap"), env), region_section(by_kind(recs, "region_decode"), env),
            prepare_section.section(recs), amp_parity.parity_section(by_kind(recs, "train"))]
    text = "\n".join([words("region.head"), *[b for b in body if b], "## Environments\n\n" + env.table()])
    path = out_dir / "RESULTS.md"
    write_text(path, text)
    return path
