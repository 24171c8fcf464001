"""One cluster's report: ``results/reports/<tag>/README.md`` and its figures, from that tag's records alone.

    python -m results.report --tag mycluster      # results/records/mycluster.jsonl -> results/reports/mycluster/

What a user publishes about their cluster, laid out as the seed's report: a summary paragraph,
then throughput against GPUs (ideal line, efficiency labels), the time to train 90 epochs, the
learning curves (runs that trained past one epoch), the I/O from the nodes, and the scaling
model's prediction for this cluster with its binding term. Each figure is followed by its table.

One series per configuration (repeated points, of one sweep or several, are folded into their
mean with the standard deviation drawn as an error bar, so a repeated node count never zig-zags),
named for a reader, and one panel per hardware kind. Only the figures the records support are
drawn. Output is deterministic, like RESULTS.md.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from imagenet.common.files import write_text
from results.analysis import cluster_model, comparisons
from results.analysis.cluster_model import predict_cluster
from results.analysis.efficiency import efficiencies
from results.analysis.spread import Point, aggregate
from results.core import records
from results.core.kinds import Record
from results.core.records import by_kind, group_by
from results.report import data_scale, faults, figures, predicted_tta
from results.core.setups import IMAGENET_TRAIN_IMAGES
from results.report.common import (data_label, fmt, gpu_axis, md_table, pct, prose, recipe_label, sorted_groups,
                                   train_hours)
from results.report.curves import CURVES, curve_runs, curve_series, epoch_rows
from results.report.storage import format_name, reader_panels

log = logging.getLogger(__name__)

EPOCHS = 90  # the seed's (and HAL's published) time-to-train: 90 ImageNet epochs


# ---------------------------------------------------------------- series

def hardware(record: Record) -> str:
    """What one process ran on: the GPU model, or the CPU model for CPU-only points."""
    e = record.environment
    if e.gpu_count and e.gpu_name:
        return str(e.gpu_name)
    return f"CPU: {e.cpu_model or 'unknown'}"


def series_name(record: Record) -> str:
    """A configuration, as a reader names it: setup or variant, model, precision, batch, data, launcher."""
    p, m = record.point, record.metrics
    name = p.setup or p.variant
    prec = m.precision_label or p.precision
    data = data_label(p.data) + ("" if p.data == "dummy" else f" ({p.workers or 0} loader workers)")
    launcher = f", SLURM {p.procs_per_node or 1} proc/node" if record.runner == "slurm" else ""
    return (f"{name}: {p.arch} {p.image_size}px {prec}, batch {p.batch_size}/GPU, {data}{launcher}"
            f"{recipe_label(p)}")


def train_series(train: Sequence[Record]) -> Dict[Tuple[str, str], List[Point]]:
    """(hardware, name) -> images/s per world size, repeats folded; profiled runs are no speeds."""
    groups = group_by([r for r in train if not r.profiled], lambda r: (hardware(r), series_name(r)))
    return {k: aggregate(v, lambda r: r.metrics.world_size, lambda r: r.metrics.images_per_s)
            for k, v in sorted(groups.items())}


def _ids(pt: Point) -> str:
    return ", ".join(r.source for r in pt.records)


def _std(pt: Point) -> Optional[float]:
    return pt.std if pt.n > 1 else None


def efficiency(pts: Sequence[Point]) -> List[float]:
    return efficiencies([p.x for p in pts], [p.mean for p in pts])


# ---------------------------------------------------------------- sections

def scaling_panels(scaling: Dict[Tuple[str, str], List[Point]]) -> Tuple[List[dict], List[dict]]:
    """(throughput panels, time-to-train panels): one panel per hardware kind, one line per series with
    its spread, its ideal line and efficiency labels (figures.with_ideal)."""
    thr, hours = [], []
    for hw in sorted({hw for hw, _ in scaling}):
        s_thr, s_hours = [], []
        for i, ((h, name), pts) in enumerate(k for k in scaling.items() if k[0][0] == hw):
            c, xs = figures.palette(i), [p.x for p in pts]
            s_thr.append(figures.spread(name, pts, color=c, label_above=i % 2 == 1))
            h90 = [train_hours(p.mean, EPOCHS) for p in pts]
            s_hours.append({"label": name, "x": xs, "y": h90, "err": [h * p.std / p.mean for h, p in zip(h90, pts)],
                            "color": c, "label_above": i % 2 == 1})
        thr.append({"title": hw, "xlabel": gpu_axis(hw), "ylabel": "training throughput (images/s)",
                    "series": figures.with_ideal(s_thr), "xlog": True, "ymin0": True})
        hours.append({"title": hw, "xlabel": gpu_axis(hw), "ylabel": f"time to train {EPOCHS} epochs (hours)",
                      "series": figures.with_ideal(s_hours, time=True), "xlog": True, "ymin0": True})
    return thr, hours


def throughput_section(series: Dict[Tuple[str, str], List[Point]], fig_dir: Path) -> str:
    scaling = {k: v for k, v in series.items() if len(v) > 1}
    if not scaling:
        return _configurations_section(series, fig_dir)
    thr, hours = scaling_panels(scaling)
    figures.report_panels(fig_dir / "training_throughput.png", thr, "Training throughput (mean, std of repeats); "
                          "dotted: ideal; labels: efficiency")
    figures.report_panels(fig_dir / "training_time.png", hours, f"Time to train {EPOCHS} ImageNet epochs at the "
                          "measured rate; dotted: ideal")
    rows, trows = [], []
    for (hw, name), pts in scaling.items():
        for p, e in zip(pts, efficiency(pts)):
            nodes = p.records[0].metrics.nodes
            rows.append([name, hw, int(p.x), nodes, p.n, p.mean, _std(p), p.mean / p.x, pct(e), _ids(p)])
            trows.append([name, int(p.x), train_hours(p.mean), train_hours(p.mean, EPOCHS), _ids(p)])
    singles = {k: v for k, v in series.items() if len(v) == 1}
    more = ("\nConfigurations measured at one GPU count only (no scaling to draw):\n\n" + _config_table(singles)
            if singles else "")
    return prose("cluster.throughput", epochs=EPOCHS, images=IMAGENET_TRAIN_IMAGES,
                 table=md_table("cluster.throughput_columns", rows) + more,
                 hours=md_table("cluster.hours_columns", trows, epochs=EPOCHS))


def bound_by(metrics) -> str:
    """What held a step, from the medians of where its time went (TrainMetrics)."""
    wait, host, device = metrics.data_wait_ms, metrics.host_ms, metrics.device_ms
    if wait >= 0.25 * (wait + host):
        return "the loader"
    if device is None:
        return "the CPU's arithmetic"
    return "the GPU's arithmetic" if device > 1.2 * host else "the host (the GPU waits for its launches)"


def breakdown_section(train: Sequence[Record]) -> str:
    """Where each point's steady step went: medians of waiting for the loader, the host's loop and the step's
    span on the GPU's stream (imagenet.train.metrics.StepBreakdown)."""
    measured = [r for r in train if r.ok and r.metrics.host_ms is not None]
    if not measured:
        return ""
    rows = [[series_name(r), hardware(r), r.metrics.step_time_ms, r.metrics.data_wait_ms, r.metrics.host_ms,
             r.metrics.device_ms, bound_by(r.metrics), r.source] for r in measured]
    header = ("configuration", "hardware", "step (ms, mean)", "waiting for data (ms)", "host in the loop (ms)",
              "GPU stream span (ms)", "held by", "record")
    return ("## Where a step goes\n\nMedians over each run's steady steps: waiting for the loader's next batch, the "
            "host's time in the loop with the batch in hand (on a CPU, the step's arithmetic itself), and on a GPU "
            "the step's span on the device's stream between CUDA events. A span close to the host's time means the "
            "GPU waited for the host's launches.\n\n" + md_table(header, rows) + "\n")


def _config_table(series: Dict[Tuple[str, str], List[Point]]) -> str:
    rows = [[name, hw, int(p.x), p.n, p.mean, _std(p), train_hours(p.mean, EPOCHS), _ids(p)]
            for (hw, name), pts in series.items() for p in pts]
    return md_table("cluster.config_columns", rows, epochs=EPOCHS)


def _configurations_section(series: Dict[Tuple[str, str], List[Point]], fig_dir: Path) -> str:
    """No series spans GPU counts: one bar per configuration instead of a scaling line."""
    if not series:
        return ""
    items = sorted(series.items(), key=lambda kv: -kv[1][0].mean)
    hw = sorted({h for h, _ in series})
    figures.hbars(fig_dir / "training_throughput.png", [name for (_, name), _ in items],
                  [pts[0].mean for _, pts in items], [pts[0].std for _, pts in items], "training throughput (images/s)",
                  f"{' / '.join(hw)}: {int(items[0][1][0].x)} GPU(s), mean and std of repeats",
                  [fmt(pts[0].mean) + (f" ± {fmt(pts[0].std)} (n={pts[0].n})" if pts[0].n > 1 else "")
                   for _, pts in items])
    return prose("cluster.configurations", epochs=EPOCHS, images=IMAGENET_TRAIN_IMAGES,
                 table=_config_table(dict(items)))


def curves_section(train: Sequence[Record], fig_dir: Path) -> str:
    runs = [t for t in curve_runs([r for r in train if (r.point.epochs or 1) > 1], []) if t[2]]
    if not runs:
        return ""
    panels = []
    for metric in ("top1", "top5"):
        panel_series = [s for split in ("train", "val") for s in curve_series(
            runs, CURVES[f"{metric}_{split}"][0], f", {split}", style="o-" if split == "train" else "s--")]
        panels.append({"title": f"{metric.replace('top', 'top-')} accuracy per epoch", "xlabel": "epoch",
                       "ylabel": f"{metric.replace('top', 'top-')} (%)", "series": panel_series, "ymin0": True})
    figures.report_panels(fig_dir / "learning_curves.png", panels, "Learning curves (TensorBoard events of rank 0; "
                          "solid: train, dashed: validation)")
    rows = epoch_rows(runs, lambda r: [r.source])
    return prose("cluster.curves", table=md_table("cluster.curves_columns", rows))


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
            rows.append([name, k, int(p.x), p.n, p.mean, _std(p), p.mean / p.x, f.mean, _std(f),
                         p.records[0].metrics.bytes_per_file, _ids(p)])
    notes = "".join(f"- {n}\n" for n in sorted({r.note for r in storage if r.note}))
    return prose("cluster.storage", notes=f"\nNotes recorded with these points:\n\n{notes}" if notes else "",
                 table=md_table("cluster.storage_columns", rows))


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
    return prose("cluster.loader", figure=fig, table=md_table("cluster.loader_columns", rows))


def pipeline_section(steady: Sequence[Record], fig_dir: Path) -> str:
    ratios = [r for r in steady if r.point.backend != "baseline" and r.metrics.ratio_per_core]
    if not ratios:
        return ""
    groups = sorted_groups(ratios, lambda r: f"{r.point.backend}, {r.point.split}", lambda r: r.point.workers)
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
    return prose("cluster.pipeline", table=md_table("cluster.pipeline_columns", rows))


def _main_series(series: Dict[Tuple[str, str], List[Point]]) -> Optional[Tuple[Tuple[str, str], List[Point]]]:
    """The series the model is checked on: the most GPU counts, then the largest."""
    scaling = [(k, v) for k, v in series.items() if len(v) > 1]
    return max(scaling, key=lambda kv: (len(kv[1]), kv[1][-1].x, kv[0])) if scaling else None


def model_section(series, ar, overlap, storage, fig_dir: Path) -> Tuple[str, Optional[str]]:
    """(markdown, the binding term at the largest measured scale or None)."""
    main = _main_series(series)
    if not series:  # no training measured under this tag: nothing for the model to say
        return "", None
    if not main:
        return prose("cluster.single") + "\n", None
    (hw, name), pts = main
    recs = [r for p in pts for r in p.records]
    pred, why = predict_cluster(recs, ar, overlap, storage)
    if not pred:
        return f"## Scaling model\n\nNo prediction for {name}: {why}.\n", None
    xs = [row["gpus"] for row in pred.rows]
    figures.report_panels(fig_dir / "scaling_model.png", [{
        "title": hw, "xlabel": gpu_axis(hw), "ylabel": "images/s",
        "xlog": True, "ymin0": True, "series": [
            figures.spread("measured (mean, std)", pts, style="o", color=figures.palette(0)),
            {"label": "scaling model", "x": xs, "y": [row["predicted"] for row in pred.rows], "style": "--",
             "color": figures.palette(1), "labels": [row["binding"] for row in pred.rows]}]}],
        "Scaling model for this cluster (labels: the binding term)")
    rows = [[row["gpus"], row["measured"], row["predicted"], pct(row["error"]) if row["error"] is not None else "-",
             pct(row["efficiency"]), row["exposed_comm_ms"], row["straggler_ms"], row["binding"]] for row in pred.rows]
    largest = max((row for row in pred.rows if row["measured"] is not None), key=lambda row: row["gpus"])
    w, src = pred.whole, pred.sources
    text = prose("cluster.model", name=name, gpus=largest["gpus"], binding=largest["binding"],
                 table=md_table("cluster.model_columns", rows), misses=_misses(pred), src=src,
                 t_c=fmt(1e3 * w.inputs.step_time_s), grad=fmt(w.inputs.grad_bytes),
                 busbw="-" if w.inputs.busbw_intra == float("inf") else f"{fmt(w.inputs.busbw_intra / 1e9)} GB/s",
                 link=src.get("all-reduce link", "not measured"), h=pct(w.hidden_fraction),
                 hidden=src.get("hidden fraction", "none: h = 0"), storage="-" if not w.storage else
                 f"{fmt(w.storage.read_bytes_per_s / 1e6)} MB/s, {fmt(w.storage.opens_per_s)} files/s",
                 storage_from=src.get("storage", "not on this series' path"),
                 missing="".join(f"- {m}\n" for m in pred.missing),
                 tta=predicted_tta.predicted_section(pred, hw, fig_dir))
    return text, largest["binding"] + (
        " (all-reduce not measured)" if any(m.startswith("all-reduce") for m in pred.missing) else "")


def _misses(pred) -> str:
    """Where the model misses a measured point by more than the tolerance, and which term misses."""
    found = cluster_model.misses(pred)
    if not found:
        return f"The model agrees with every measured point within {cluster_model.TOLERANCE:.0%}.\n"
    lines = [f"- {m.gpus} {'GPU' if m.gpus == 1 else 'GPUs'}: {pct(m.error)}: a step of {fmt(m.predicted_ms)} ms "
             f"predicted, {fmt(m.measured_ms)} ms measured; {m.term}." for m in found]
    return prose("cluster.misses", tolerance=cluster_model.TOLERANCE, lines="\n".join(lines)) + "\n"


def _unit(hw: str) -> str:
    return "process(es)" if hw.startswith("CPU") else "GPU(s)"


def headline(recs: Sequence[Record], series, binding: Optional[str]) -> Dict[str, object]:
    """What the summary paragraph (and RESULTS.md's table of clusters) says about one tag."""
    ok = [r for r in recs if r.status == "ok"]
    out: Dict[str, object] = {
        "records": len(recs), "ok": len(ok), "kinds": sorted({r.kind for r in ok}),
        "hardware": " / ".join(sorted({hardware(r) for r in ok})) or "unknown hardware",
        "nodes": max((r.nodes for r in ok), default=1),
        "cores": "/".join(sorted({str(r.environment.cpu_count) for r in ok if r.environment.cpu_count})),
        "best": None, "efficiency": None, "binding": binding,
        "notes": sorted({r.note for r in ok if r.note})}
    best = max(((k, p) for k, pts in series.items() for p in pts), key=lambda kp: kp[1].mean, default=None)
    if best:
        (hw, name), p = best
        out["best"] = (f"{fmt(p.mean)} images/s", f"{name}, {int(p.x)} {_unit(hw)}" + (f", mean of {p.n}" if p.n > 1
                                                                                        else ""), _ids(p))
    main = _main_series(series)
    if main:
        (hw, name), pts = main
        out["efficiency"] = (pct(efficiency(pts)[-1]), f"{int(pts[-1].x)} {_unit(hw)} vs {int(pts[0].x)}", name)
    return out


def summary(tag: str, headline: Dict[str, object]) -> str:
    """The summary paragraph: what was measured, then each of the headline's facts that the records give."""
    h, notes = headline, headline["notes"]
    parts = [prose("cluster.summary", tag=tag, h=h, kinds=", ".join(h["kinds"]) or "no",
                   cores=f" ({h['cores']} CPU cores per node)" if h["cores"] else ""),
             h["best"] and prose("cluster.summary_best", best=h["best"]),
             h["efficiency"] and prose("cluster.summary_efficiency", efficiency=h["efficiency"]),
             h["binding"] and prose("cluster.summary_binding", binding=h["binding"]),
             notes and prose("cluster.summary_notes" if len(notes) <= 3 else "cluster.summary_many_notes",
                             notes=" / ".join(notes), n=len(notes))]
    return " ".join(part for part in parts if part) + "\n"


DRAWN = ("train", "storage", "io", "pipeline", "allreduce", "overlap", "shards_pipeline", "data_opens", "index_memory",
         "fault", "time_to_accuracy")  # the kinds the sections above (or RESULTS.md's sections they reuse) present


def other_section(recs: Sequence[Record]) -> str:
    """Records of kinds no section draws: their points and numeric metrics, as recorded."""
    rows = [[r.kind, _as_recorded(r.recorded("point"), lambda v: v not in (None, [], "")),
             _as_recorded(r.recorded("metrics"), lambda v: isinstance(v, (int, float))), r.source]
            for r in recs if r.ok and r.kind not in DRAWN]
    return prose("cluster.other", table=md_table("cluster.other_columns", rows)) if rows else ""


def _as_recorded(values: Dict[str, object], shown) -> str:
    return ", ".join(f"{k}={fmt(v)}" for k, v in sorted(values.items()) if shown(v))


def failed_section(recs: Sequence[Record]) -> str:
    failed = [[r.kind, r.sweep, (r.error or "").splitlines()[-1][:160] if r.error else "-",
               r.source] for r in recs if r.status != "ok"]
    return prose("cluster.failed", table=md_table("cluster.failed_columns", failed)) if failed else ""


ENV_KEYS = ("cpu_model", "cpu_count", "gpu_name", "gpu_count", "torch", "torchvision", "cuda", "nccl", "python")


def environments(recs: Sequence[Record]) -> str:
    """The distinct software and hardware (hosts, jobs and commits vary per record and are not repeated)."""
    envs = group_by(recs, lambda r: tuple(str(getattr(r.environment, k)) for k in ENV_KEYS))
    rows = [[*(fmt(getattr(rs[0].environment, k)) for k in ENV_KEYS), len(rs),
             ", ".join(sorted({str(r.environment.git_commit)[:12] for r in rs}))] for rs in envs.values()]
    notes = sorted({r.note for r in recs if r.note})
    return ("## Environment\n\n" + md_table([*ENV_KEYS, "records", "commits"], rows)
            + ("\nNotes recorded with the points:\n\n" + "".join(f"- {n}\n" for n in notes) if notes else ""))


# ---------------------------------------------------------------- the report

def build_tag(tag: str, records_file: Path, out_dir: Path,
              loaded: Optional[Tuple[List[dict], List]] = None) -> Tuple[Path, Dict[str, object]]:
    """Write ``out_dir/README.md`` and its figures from one records file (LOADED: its records and unusable
    lines, where the caller has read it already); returns the README's path and the headline (hardware,
    best throughput, efficiency at the largest scale, binding term)."""
    recs, problems = loaded if loaded is not None else records.load_typed([records_file])
    train = by_kind(recs, "train")
    series = train_series(train)
    model, binding = model_section(series, by_kind(recs, "allreduce"), by_kind(recs, "overlap"),
                                   by_kind(recs, "storage"), out_dir)
    shards = data_scale.section(recs) if any(r.kind in ("shards_pipeline", "data_opens", "index_memory")
                                                       for r in recs) else ""
    body = [throughput_section(series, out_dir), breakdown_section(train), curves_section(train, out_dir),
            storage_section(by_kind(recs, "storage"), out_dir), loader_section(by_kind(recs, "io"), out_dir),
            pipeline_section(by_kind(recs, "pipeline"), out_dir), model,
            predicted_tta.measured_section([predicted_tta.from_record(r) for r in by_kind(recs, "time_to_accuracy")]),
            shards, faults.section(recs),
            other_section(recs), failed_section(recs)]
    top = headline(recs, series, binding)
    head = prose("cluster.head", tag=tag, file=records_file.name, unusable=len(problems), summary=summary(tag, top))
    text = "\n".join([head, *[b for b in body if b], environments(recs)])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "README.md"
    write_text(path, text)
    log.info("wrote %s", path)
    return path, top
