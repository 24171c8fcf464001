"""Ratios against the baselines, computed from records only (the report prints, never types, them).

- Training step: each ``--setups`` point's ms/step and images/s against the ``baseline`` setup of
  the same sweep, data, model, image size, batch and process count.
- Real JPEGs against synthetic data: the same setup's images/s on both, in one sweep.
- Multi-node: the SLURM sweeps' train records, by sweep and node count.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import group_by
from hpc_imagenet.harness.core.setups import BASELINE_SETUP

STEP_KEYS = ("data", "arch", "image_size", "batch_size", "world_size", "nodes")


def times(ratio: Optional[float]) -> str:
    """A ratio as the report prints it: 2.03x."""
    return "-" if ratio is None else f"{ratio:.2f}x"


def _groups(recs: Sequence[Record], keys: Tuple[str, ...]) -> List[List[Record]]:
    """RECS of one sweep and the same KEYS together, the groups in a fixed order."""
    groups = group_by(recs, lambda r: (r.sweep,) + r.point_values(keys))
    return [members for _, members in sorted(groups.items(), key=lambda kv: str(kv[0]))]


def step_rows(train: Sequence[Record]) -> List[dict]:
    """One row per ``--setups`` train record, with ms/step and images/s ratios to the baseline setup."""
    usable = [r for r in train if r.point.setup and not r.profiled]
    rows = []
    for members in _groups(usable, STEP_KEYS):
        base = next((r for r in members if r.point.setup == BASELINE_SETUP), None)
        for r in sorted(members, key=lambda r: (r.point.setup != BASELINE_SETUP, r.point.setup)):
            m, b = r.metrics, base.metrics if base else None
            rows.append({"record": r, "baseline": base,
                         "step_speedup": b.step_time_ms / m.step_time_ms if b else None,
                         "throughput_ratio": m.images_per_s / b.images_per_s if b else None})
    return rows


def jpeg_vs_synthetic_rows(train: Sequence[Record]) -> List[dict]:
    """Each ``--setups`` point fed from JPEG files against the same setup on synthetic data.

    Paired when model, image size, batch, process count, GPU and code are the same. The code is the
    source digest where recorded, else the git commit; a device copy's git state can predate its files,
    so of several matching synthetic records the fastest is the reference (the fraction is a lower bound).
    """
    def key(record: Record) -> tuple:
        p = record.point
        return (p.setup, p.arch, p.image_size, p.batch_size, record.world_size, record.environment.gpu_name,
                record.environment.code)
    usable = [r for r in train if r.point.setup and r.status == "ok" and not r.profiled]
    synthetic = {k: max(rs, key=lambda r: r.metrics.images_per_s)
                 for k, rs in group_by([r for r in usable if r.point.data == "dummy"], key).items()}
    return [{"record": r, "synthetic": synthetic[key(r)],
             "fraction": r.metrics.images_per_s / synthetic[key(r)].metrics.images_per_s}
            for r in usable if r.point.data != "dummy" and key(r) in synthetic]
