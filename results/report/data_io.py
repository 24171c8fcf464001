"""Report section: data loading without a model (loader workers, concurrent readers, storage bytes)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Sequence

from results.core.kinds import Record
from results.core.records import group_by
from results.report import figures
from results.report.common import Environments, fmt, md_table, prose


def io_section(io: Sequence[Record], pub: dict, env: Environments, fig_dir: Path) -> str:
    def series(sweep_key: str, metric: str) -> List[figures.Series]:
        groups = group_by(io, lambda r: (r.point.backend, r.point.cache))
        backends = sorted({b for b, _ in groups})
        out = []
        for (b, cache), rs in sorted(groups.items()):
            rs = _io_sweep(rs, sweep_key)
            if rs:
                out.append({"label": f"{b}, {cache} cache", "x": [getattr(r.point, sweep_key) for r in rs],
                            "y": [getattr(r.metrics, metric) for r in rs], "color": figures.palette(backends.index(b)),
                            "style": "o-" if cache == "warm" else "s--"})
        return out
    panels = [{"title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series(key, metric), "int_x": True,
               "ymin0": True, "empty": "no io records"}
              for key, title, xlabel, ylabels in (
                  ("workers", "one reader: loader workers", "DataLoader workers",
                   ("images/s", "MB/s (file bytes read)")),
                  ("readers", "concurrent readers (as ranks on one node)", "reader processes",
                   ("images/s (all readers)", "MB/s (all readers)")))
              for metric, ylabel in zip(("images_per_s", "mb_per_s"), ylabels)]
    figures.grid(fig_dir / "IO.png", panels, "Data loading without a model (decode + augment to 224x224)")
    rows = [[p.backend, p.cache, p.workers, p.readers, m.images, m.images_per_s, m.mb_per_s, m.files_per_s,
             m.storage_mb_per_s, m.syscr_per_s, m.bytes_per_image, m.first_batch_s, m.cold_verified, m.cache_method,
             r.host_load_1m, env.id(r), r.source]
            for r in sorted(io, key=lambda r: (r.point.backend, r.point.cache, r.point.readers, r.point.workers))
            for p, m in [(r.point, r.metrics)]]
    hal = pub["hal_2020"]["io_64gpu"]
    feb = pub["hal_2020"]["runs"][0]
    implied = [[f"{g:.3g}", f"{g * 1e9 / feb['train_img_per_s'][-1] / 1e3:.0f}"] for g in hal["avg_read_GBps"]
               if g is not None]
    return prose("data_io.section", gpus=feb["gpus"][-1], note=hal["note"], label=feb["label"],
                 rate=fmt(feb["train_img_per_s"][-1]), implied=md_table("data_io.implied_columns", implied),
                 table=md_table("data_io.columns", rows)) + "\n"


def _io_sweep(rs: Sequence[Record], key: str) -> List[dict]:
    """Points of the workers sweep (one reader), or of the readers sweep (at its per-reader workers,
    the 1-reader point with the same workers included as its start)."""
    if key == "workers":
        pts = [r for r in rs if r.point.readers == 1]
    else:
        multi = [r for r in rs if r.point.readers > 1]
        if not multi:
            return []
        w = multi[0].point.workers
        pts = [r for r in rs if r.point.workers == w]
    return sorted(pts, key=lambda r: getattr(r.point, key))
