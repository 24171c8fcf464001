"""The record kinds, each declared once: its point, metrics, units and the report section that draws it.

A kind is one :class:`Kind` passed to :func:`declare` (the harness's at the end of
:mod:`hpc_imagenet.harness.core.kinds`, a study's in its own ``kinds.py``). Everything that lists kinds reads
:data:`KINDS`: validation (:mod:`hpc_imagenet.harness.core.records`), the units stored in every record
(:func:`units_for`), and the tag report (``hpc_imagenet/harness/report/cluster.py`` draws the sections of
:func:`sections` in declaration order and shows the kinds outside :func:`drawn` as recorded).

A name is declared once: a second, different declaration of a kind, or a metric given a unit other than
the one the harness (or another kind) already gives that name, is an error at import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

# The units of the metric names several kinds use; a kind's declaration adds the units of its own names.
_NAMES_BY_UNIT = {
    "ms": ("step_time_ms", "data_time_ms", "compute_time_ms", "data_wait_ms", "host_ms", "device_ms",
           "checkpoint_stall_ms_mean", "checkpoint_stall_ms_max"),
    "s": ("epoch_time_s", "elapsed_s", "checkpoint_write_s_mean", "wall_s"),
    "bytes": ("peak_memory_bytes", "rchar", "read_bytes", "bytes", "checkpoint_bytes_written", "bytes_per_file",
              "rank_rss_bytes", "rank_index_bytes"),
    "bytes (max over workers)": ("worker_private_bytes", "worker_pss_bytes", "worker_rss_bytes"),
    "MB/s (1e6 bytes)": ("mb_per_s", "mb_per_s_per_node", "min_node_mb_per_s", "storage_mb_per_s"),
    "GB/s (1e9 bytes)": ("algbw_gbps", "busbw_gbps"),
    "images/s": ("images_per_s", "images_per_s_per_process"),
    "files/s": ("files_per_s", "files_per_s_per_node"),
    "%": ("top1", "top5", "target_top1", "best_top1", "best_top1_in_budget"),
    "fraction": ("scaling_efficiency",),
    "x": ("ratio_min", "ratio_max"),
    "checkpoints": ("checkpoint_saves", "checkpoint_periodic", "checkpoints_lost"),
    "steps": ("checkpoint_every_steps", "steps_trained_twice"),
    "epochs": ("epochs", "epochs_to_target", "eval_every"),
    "cores": ("cores_busy", "cores"),
    "load average (1 min)": ("load_1m_mean", "load_1m_max"),
}
UNITS: Dict[str, str] = {name: unit for unit, names in _NAMES_BY_UNIT.items() for name in names} | {
    "syscr": "read syscalls", "time_us": "us", "cpu_s": "CPU s (user + system)", "cpu_ms_per_image": "CPU ms",
    "images_per_cpu_s": "images per CPU second (images/s per busy core)",
    "ratio_per_core": "x (vs the baseline backend)", "rounds": "rounds", "files": "files",
    "opens": "files opened (strace openat)", "dataset_opens": "files opened (dataset counter)",
    "shards": "shard files", "opening_processes": "processes (that opened a data file)",
    "max_opens_per_file": "opens (most of one file by one process)", "workers": "processes",
    "touched": "chunks of 65536 entries", "survived": "1 = the run finished after the fault",
    "detect_s": "s (fault injected -> the job or process ended)",
}  # every kind's units, once declared: the one table records take their units from


@dataclass(frozen=True)
class Kind:
    """One record kind: NAME (the records' ``kind``), the frozen dataclasses of its POINT and METRICS
    (:mod:`hpc_imagenet.harness.core.kinds` reads them), the UNITS of its metric names the table above lacks, and
    SECTION: ``"module:function"`` of the tag report's section that draws its records (the function takes
    the tag's records and a :class:`hpc_imagenet.harness.report.common.Page`, returns markdown, "" for none), or None:
    the report lists its records as recorded."""

    name: str
    point: type
    metrics: type
    units: Mapping[str, str] = field(default_factory=dict)
    section: Optional[str] = None


KINDS: Dict[str, Kind] = {}  # every declared kind, in declaration order


class DeclarationError(ValueError):
    """A kind or a unit declared twice, differently."""


def declare(kind: Kind) -> Kind:
    """Add KIND to :data:`KINDS` and its units to :data:`UNITS`; declaring the same kind again changes nothing."""
    known = KINDS.get(kind.name)
    if known is not None and known != kind:
        raise DeclarationError(f"record kind {kind.name!r} is declared twice, differently ({known} and {kind}); "
                               "rename one of them")
    if kind.section is not None and kind.section.count(":") != 1:
        raise DeclarationError(f"record kind {kind.name!r}: section {kind.section!r} is not 'module:function'; "
                               "name the report section as hpc_imagenet.harness.report.MODULE:FUNCTION")
    clashes = [f"{n}: {UNITS[n]!r} vs {u!r}" for n, u in kind.units.items() if UNITS.get(n, u) != u]
    if clashes:
        raise DeclarationError(f"record kind {kind.name!r} gives metric(s) another unit than already declared "
                               f"({'; '.join(clashes)}); rename the metric or use the declared unit")
    UNITS.update(kind.units)
    KINDS[kind.name] = kind
    return kind


def names() -> Tuple[str, ...]:
    """Every declared kind's name, in declaration order."""
    return tuple(KINDS)


def drawn() -> Tuple[str, ...]:
    """The kinds a section of the tag report draws; the others are shown as recorded."""
    return tuple(k.name for k in KINDS.values() if k.section)


def sections() -> Tuple[str, ...]:
    """The tag report's sections (``"module:function"``), each once, in the order of their kinds' declarations."""
    return tuple(dict.fromkeys(k.section for k in KINDS.values() if k.section))


def units_for(metrics: Mapping[str, Any]) -> Dict[str, str]:
    """The units of METRICS' names (a record's ``units``), where declared."""
    return {k: UNITS[k] for k in metrics if k in UNITS}
