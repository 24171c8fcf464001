"""Report section: shared-storage read throughput seen from the nodes (``results.bench scaling --io``).

One series per data format and readers per node, against the node count: the aggregate the
storage delivered (MB/s, files/s) and what each node got. Formats are compared as recorded
(imagefolder, shards, a staged copy: whatever ``--format-label`` named)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from results.analysis.spread import aggregate
from results.core.kinds import Record
from results.core.records import group_by
from results.report import figures
from results.report.common import Environments, md_table, prose, sorted_groups


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


def _series(recs: Sequence[Record]) -> Dict[Tuple[str, str, int, str], List[dict]]:
    return sorted_groups(recs, lambda r: (r.sweep, r.point.format, r.point.readers_per_node, r.point.cache or "as-is"),
                         lambda r: r.point.nodes)


def storage_section(recs: Sequence[Record], env: Environments, fig_dir: Path) -> str:
    groups = _series(recs)
    multi = len({k[0] for k in groups}) > 1

    def label(key: Tuple[str, str, int, str]) -> str:
        return f"{key[1]}, {key[2]} reader(s)/node, cache {key[3]}" + (f" [{key[0]}]" if multi else "")
    readers = sorted({k[2] for k in groups})
    panels = reader_panels(recs, [("mb_per_s", "all nodes", "MB/s read"), ("files_per_s", "all nodes", "files/s"),
                                  ("mb_per_s_per_node", "per node", "MB/s read per node"),
                                  ("files_per_s_per_node", "per node", "files/s per node")])
    figures.report_panels(fig_dir / "storage.png", panels, "Shared-storage reads seen from the nodes (whole files; "
                          "mean and std where a point was repeated)", ncols=len(readers), shared_legend=True)
    rows = [[label(k), r.point.nodes, r.point.readers_per_node, r.metrics.mb_per_s,
             r.metrics.mb_per_s_per_node, r.metrics.min_node_mb_per_s, r.metrics.files_per_s,
             r.metrics.files_per_s_per_node, r.metrics.bytes_per_file, r.metrics.files,
             r.metrics.elapsed_s, r.metrics.complete, r.metrics.storage_mb_per_s,
             r.environment.slurm_job_id,
             r.note, env.id(r), r.source] for k, rs in groups.items() for r in rs]
    return prose("storage.section", table=md_table("storage.columns", rows))
