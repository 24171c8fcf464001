"""Report section: all-reduce bandwidth, with the latency/bandwidth fit the scaling model uses."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from hpc_imagenet.harness.analysis.allreduce_fit import fit_alpha_beta, hop_latency
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.core.records import by_kind
from hpc_imagenet.harness.report.common import Environments, Page, md_table, prose, sorted_groups


def allreduce_groups(ar: Sequence[Record]) -> Dict[Tuple[str, str, int], List[dict]]:
    return sorted_groups(ar, lambda r: (r.sweep, r.point.backend, r.metrics.world_size), lambda r: r.metrics.bytes)


ALLREDUCE_COLUMNS = ("series", "bytes", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "iterations", "env",
                     "record")
FIT_COLUMNS = ("series", "small-message time (us)", "per-hop latency (us)", "fitted busbw (GB/s)")


def allreduce_section(ar: Sequence[Record], env: Environments, fig_dir: Path) -> str:
    groups = allreduce_groups(ar)
    series, rows, fits = [], [], []
    for i, ((sweep, backend, n), rs) in enumerate(groups.items()):
        label = f"{backend}, {n} processes" + (f" [{sweep}]" if len(groups) > 1 else "")
        xs = [r.metrics.bytes for r in rs]
        series += [{"label": f"{bw}, {label}", "x": xs, "y": [getattr(r.metrics, f"{bw}_gbps") for r in rs],
                    "color": figures.palette(i), "style": style} for bw, style in (("busbw", "o-"), ("algbw", "x:"))]
        rows += [[label, r.metrics.bytes, figures.size_label(r.metrics.bytes), r.metrics.time_us,
                  r.metrics.algbw_gbps, r.metrics.busbw_gbps, r.metrics.iters, env.id(r),
                  r.source] for r in rs]
        fit = fit_alpha_beta([r.metrics for r in rs])
        if fit:
            fits.append([label, fit["alpha_s"] * 1e6, hop_latency(fit["alpha_s"], n) * 1e6,
                         fit["busbw_bytes_per_s"] / 1e9])
    figures.allreduce(fig_dir / "allreduce.png", series, "All-reduce bandwidth (nccl-tests definitions)")
    return prose("comm.allreduce", table=md_table(ALLREDUCE_COLUMNS, rows),
                 fits=md_table(FIT_COLUMNS, fits))


def draw(recs: Sequence[Record], page: Page) -> str:
    ar = by_kind(recs, "allreduce")
    return allreduce_section(ar, page.env, page.out_dir) if ar else ""
