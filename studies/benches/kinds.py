"""The record kinds of the one-off benches (overlap, region_decode, prepare), registered with the harness."""
# No ``from __future__ import annotations``: the harness reads the evaluated Annotated markers.
from dataclasses import dataclass
from typing import Optional

from results.core.kinds import Req, Text, register


@dataclass(frozen=True)
class OverlapPoint:
    arch: Text = None
    backend: Text = None
    batch_size: Optional[int] = None
    bucket_cap_mb: Optional[float] = None
    image_size: Optional[int] = None
    world_size: Optional[int] = None

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
class OverlapMetrics:
    step_time_ms: Req = None
    step_no_allreduce_ms: Req = None
    exposed_comm_ms: Req = None
    allreduce_alone_ms: Req = None
    world_size: Req = None
    grad_bytes: Optional[int] = None
    hidden_fraction: Optional[float] = None
    steps: Optional[int] = None

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


register("overlap", OverlapPoint, OverlapMetrics)
register("region_decode", RegionDecodePoint, RegionDecodeMetrics)
register("prepare", PreparePoint, PrepareMetrics)
