"""Shared-storage read throughput seen from the nodes (``results.bench scaling --io``), for the report's
storage section.

One series per data format and readers per node, against the node count: the aggregate the
storage delivered (MB/s, files/s) and what each node got. Formats are compared as recorded
(imagefolder, shards, a staged copy: whatever ``--format-label`` named)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

from results.analysis.spread import aggregate
from results.core.kinds import Record
from results.core.records import group_by
from results.report import figures


def format_name(record: Record) -> str:
    """A storage record's series: its data format and cache (sweeps of one format fold into it)."""
    return f"{record.point.format}, cache {record.point.cache or 'as-is'}"


def format_series(recs: Sequence[Record], metric: str) -> List[figures.Series]:
    """METRIC against nodes, one line per data format and cache: sweeps of one format fold, repeats too."""
    groups = group_by(recs, format_name)
    return [figures.spread(name, aggregate(rs, lambda r: r.point.nodes, lambda r: getattr(r.metrics, metric)),
                           color=figures.palette(i)) for i, (name, rs) in enumerate(sorted(groups.items()))]


def reader_panels(recs: Sequence[Record], specs: Sequence[Tuple[str, str, str]]) -> List[dict]:
    """A panel per (metric, title, ylabel) of SPECS and per readers per node: the metric against nodes, by format."""
    readers = sorted({r.point.readers_per_node for r in recs})
    return [{"title": f"{title}, {k} reader(s) per node", "xlabel": "nodes", "ylabel": ylabel, "ylog": True,
             "series": format_series([r for r in recs if r.point.readers_per_node == k], metric)}
            for metric, title, ylabel in specs for k in readers]
