"""The record kinds of the one-off benches (region_decode, prepare), declared to the harness; the overlap
bench's kind is in :mod:`studies.common.overlap`, which the published-model study reads too."""
# No ``from __future__ import annotations``: the harness reads the evaluated Annotated markers.
from dataclasses import dataclass
from typing import Optional

from hpc_imagenet.harness.core.kinds import Req, Text
from hpc_imagenet.harness.core.registry import Kind, declare
from studies.common import overlap  # noqa: F401  (declares the overlap kind)


@dataclass(frozen=True)
class RegionDecodePoint:
    boxes: Text = None
    data: Text = None
    decoder: Text = None
    images: Optional[int] = None

@dataclass(frozen=True)
class PreparePoint:
    classes: Optional[int] = None
    data: Text = None
    format: Text = None
    per_class: Optional[int] = None
    shard_mb: Optional[float] = None
    val_per_class: Optional[int] = None
    workers: Optional[int] = None

@dataclass(frozen=True)
class RegionDecodeMetrics:
    images_per_cpu_s: Req = None
    cpu_ms_per_image: Req = None
    rounds: Req = None
    ratio_per_core: Req = None
    ratio_min: Optional[float] = None
    ratio_max: Optional[float] = None

@dataclass(frozen=True)
class PrepareMetrics:
    images_per_s: Req = None
    mb_per_s: Req = None
    elapsed_s: Req = None
    images: Req = None
    read_mb_per_s: Req = None
    bytes: Optional[int] = None
    cpu_s: Optional[float] = None
    files: Optional[int] = None
    written_bytes: Optional[int] = None


# drawn in the benches' write-up (report.py), not in a tag's report
REGION_DECODE = declare(Kind("region_decode", RegionDecodePoint, RegionDecodeMetrics))
PREPARE = declare(Kind("prepare", PreparePoint, PrepareMetrics,
                       units={"written_bytes": "bytes", "read_mb_per_s": "MB/s (1e6 bytes)"}))
