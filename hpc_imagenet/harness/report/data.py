"""Report sections of data records: shared storage seen from the nodes (whole files read by ``hpc_imagenet.harness.bench
scaling --io``: one series per data format and readers per node, against the node count), the loader on one
node (no model), and the decoding backends' cost per core against the baseline."""
from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

from hpc_imagenet.harness.analysis import comparisons
from hpc_imagenet.harness.analysis.spread import aggregate
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind, group_by, newest_sweep
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import Page, md_table, prose


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


STORAGE_COLUMNS = ("series", "readers/node", "nodes", "repeats", "MB/s", "std", "MB/s per node", "files/s", "std",
                   "bytes/file", "records")


def storage_section(storage: Sequence[Record], fig_dir: Path) -> str:
    if not storage:
        return ""
    readers = sorted({r.point.readers_per_node for r in storage})
    panels = reader_panels(storage, [(metric, what, f"{what} read, all nodes")
                                     for metric, what in (("mb_per_s", "MB/s"), ("files_per_s", "files/s"))])
    figures.report_panels(fig_dir / "IO.png", panels, "I/O from the nodes: whole files read from shared storage "
                          "(mean and std of repeats)", ncols=len(readers), shared_legend=True)
    rows = []
    for (name, k), rs in sorted(group_by(storage, lambda r: (format_name(r), r.point.readers_per_node)).items()):
        files = aggregate(rs, lambda r: r.point.nodes, lambda r: r.metrics.files_per_s)
        for p, f in zip(aggregate(rs, lambda r: r.point.nodes, lambda r: r.metrics.mb_per_s), files):
            rows.append([name, k, int(p.x), p.n, p.mean, p.spread, p.mean / p.x, f.mean, f.spread,
                         p.records[0].metrics.bytes_per_file, p.sources])
    notes = "".join(f"- {n}\n" for n in sorted({r.note for r in storage if r.note}))
    return prose("data.storage", notes=f"\nNotes recorded with these points:\n\n{notes}" if notes else "",
                 table=md_table(STORAGE_COLUMNS, rows))


LOADER_COLUMNS = ("backend, cache", "workers", "readers", "images/s", "MB/s", "images/s per core", "record")


def loader_section(io: Sequence[Record], fig_dir: Path) -> str:
    if not io:
        return ""
    groups = group_by(io, lambda r: f"{r.point.backend}, {r.point.cache} cache")
    panels = []
    for key, xlabel, pick in (("workers", "DataLoader workers (one reader)", lambda r: r.point.readers == 1),
                              ("readers", "reader processes on one node", lambda r: r.point.readers > 1
                               or r.point.workers == 0)):
        for metric, ylabel in (("images_per_s", "images (files)/s"), ("mb_per_s", "MB/s of file bytes")):
            s = []
            for i, (name, rs) in enumerate(sorted(groups.items())):
                pts = aggregate([r for r in rs if pick(r)], lambda r, key=key: getattr(r.point, key),
                                lambda r, metric=metric: getattr(r.metrics, metric))
                if len(pts) > 1:
                    s.append(figures.spread(name, pts, color=figures.palette(i // 2),
                                            style="o-" if "cold" in name else "s--"))
            panels.append({"title": f"{ylabel} vs {key}", "xlabel": xlabel, "ylabel": ylabel, "series": s,
                           "ymin0": True})
    panels = [p for p in panels if p["series"]]
    if panels:
        figures.report_panels(fig_dir / "IO_loader.png", panels, "Data loading on one node, no model "
                              "(decode + augment to the image size)", ncols=2,
                              shared_legend=len({tuple(s["label"] for s in p["series"]) for p in panels}) == 1)
    rows = [[name, r.point.workers, r.point.readers, r.metrics.images_per_s, r.metrics.mb_per_s,
             r.metrics.images_per_cpu_s, r.source]
            for name, rs in sorted(groups.items())
            for r in sorted(rs, key=lambda r: (r.point.readers, r.point.workers))]
    fig = "![IO loader](IO_loader.png)\n\n" if panels else ""
    return prose("data.loader", figure=fig, table=md_table(LOADER_COLUMNS, rows))


def _decoder(record: Record) -> str:
    """What a pipeline point decoded with, and from where: its backend, the shards bench's source and backend, or the
    loader a user's script takes (bench loaders)."""
    p = record.point
    return ", ".join(str(v) for v in (p.variant or p.backend or p.loader, p.split, p.auto_augment) if v)


PIPELINE_COLUMNS = ("backend, split", "workers", "rounds", "per core vs baseline (median)", "range",
                    "images/s per core", "record")


def pipeline_section(steady: Sequence[Record], fig_dir: Path) -> str:
    """Each decoder's images/s per core against the baseline's, the newest sweep of each, against workers."""
    ratios = [r for r in steady if not _decoder(r).startswith("baseline") and r.metrics.ratio_per_core]
    if not ratios:
        return ""
    groups = {k: sorted(newest_sweep(rs), key=lambda r: r.point.workers)
              for k, rs in sorted(group_by(ratios, _decoder).items())}
    s = []
    for i, (name, rs) in enumerate(groups.items()):
        y = [r.metrics.ratio_per_core for r in rs]
        s.append({"label": name, "x": [r.point.workers for r in rs], "y": y, "color": figures.palette(i),
                  "err_lo": [v - r.metrics.ratio_min for v, r in zip(y, rs)],
                  "err_hi": [r.metrics.ratio_max - v for v, r in zip(y, rs)]})
    figures.report_panels(fig_dir / "pipeline.png", [{"title": "images/s per core vs the baseline backend",
                                                      "xlabel": "DataLoader workers", "ylabel": "x the baseline",
                                                      "series": s, "ymin0": True}],
                          "Decode + augment, backends in lockstep rounds (median; bars: range over rounds)")
    rows = [[name, r.point.workers, r.metrics.rounds, comparisons.times(r.metrics.ratio_per_core),
             f"{comparisons.times(r.metrics.ratio_min)}-{comparisons.times(r.metrics.ratio_max)}",
             r.metrics.images_per_cpu_s, r.source]
            for name, rs in groups.items() for r in rs]
    return prose("data.pipeline", table=md_table(PIPELINE_COLUMNS, rows))


def draw_storage(recs: Sequence[Record], page: Page) -> str:
    return storage_section(by_kind(recs, "storage"), page.out_dir)


def draw_loader(recs: Sequence[Record], page: Page) -> str:
    return loader_section(by_kind(recs, "io"), page.out_dir)


def draw_pipeline(recs: Sequence[Record], page: Page) -> str:
    return pipeline_section(by_kind(recs, "pipeline"), page.out_dir)
