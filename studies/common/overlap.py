"""The overlap record: what DDP's all-reduce leaves exposed per step, and the hidden fraction derived from it.

The one-off benches measure it (``python -m studies.benches overlap``, :mod:`studies.benches.overlap`); the
published-model study reads it as the scaling model's hidden fraction h. Both import this module, so
neither imports the other.
"""
# No ``from __future__ import annotations``: the harness reads the evaluated Annotated markers.
from dataclasses import dataclass
from typing import Optional

from hpc_imagenet.harness.core.kinds import Req, Text
from hpc_imagenet.harness.core.registry import Kind, declare
from studies import STUDIES

# where the overlap bench appends by default (its command's tag is "overlap")
OVERLAP_RECORDS = STUDIES / "benches" / "records" / "overlap.jsonl"


@dataclass(frozen=True)
class OverlapPoint:
    arch: Text = None
    backend: Text = None
    batch_size: Optional[int] = None
    bucket_cap_mb: Optional[float] = None
    image_size: Optional[int] = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class OverlapMetrics:
    step_time_ms: Req = None
    step_no_allreduce_ms: Req = None
    exposed_comm_ms: Req = None
    allreduce_alone_ms: Req = None
    world_size: Req = None
    grad_bytes: Optional[int] = None
    hidden_fraction: Optional[float] = None
    steps: Optional[int] = None


OVERLAP = declare(Kind("overlap", OverlapPoint, OverlapMetrics, units={
    "step_no_allreduce_ms": "ms", "exposed_comm_ms": "ms", "allreduce_alone_ms": "ms", "grad_bytes": "bytes",
    "hidden_fraction": "fraction"}))  # drawn in the benches' write-up, not in a tag's report


def hidden_fraction(exposed_s: float, allreduce_alone_s: float) -> float:
    """h from an overlap measurement: 1 - exposed / alone, clamped to [0, 1]."""
    if allreduce_alone_s <= 0:
        raise ValueError(f"all-reduce time {allreduce_alone_s!r} must be positive")
    return min(max(1.0 - exposed_s / allreduce_alone_s, 0.0), 1.0)
