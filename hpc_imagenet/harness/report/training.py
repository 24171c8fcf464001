"""Report sections of training records: throughput against GPUs (ideal line, efficiency labels) with the time
to train 90 epochs, where a step's time goes, and the learning curves (runs that trained past one epoch).

One series per configuration (repeated points, of one sweep or several, are folded into their mean with the
standard deviation drawn as an error bar, so a repeated node count never zig-zags), named for a reader, and
one panel per hardware kind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.analysis.efficiency import efficiencies
from hpc_imagenet.harness.analysis.spread import Point, aggregate
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind, group_by
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES
from hpc_imagenet.harness.report import figures, gpu_step
from hpc_imagenet.harness.report.common import (Page, data_label, fmt, gpu_axis, md_table, pct, prose, recipe_label,
                                                train_hours)
from hpc_imagenet.harness.report.curves import CURVES, curve_runs, curve_series, epoch_rows
from hpc_imagenet.harness.report.steps import step_section

EPOCHS = 90  # the seed's (and HAL's published) time-to-train: 90 ImageNet epochs


def hardware(record: Record) -> str:
    """What one process ran on: the GPU model, or the CPU model for CPU-only points."""
    e = record.environment
    if e.gpu_count and e.gpu_name:
        return str(e.gpu_name)
    return f"CPU: {e.cpu_model or 'unknown'}"


def series_name(record: Record) -> str:
    """A configuration, as a reader names it: setup or variant, model, precision, batch, data, launcher."""
    p, m = record.point, record.metrics
    if p.variant == "script":  # a user's own script (bench scaling --script): its file and its own flags
        flags = " ".join(p.extra_args or [])
        return (f"your script {p.arch} ({flags}), batch {p.batch_size}/process, SLURM {p.procs_per_node or 1} "
                "proc/node")
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


def efficiency(pts: Sequence[Point]) -> List[float]:
    return efficiencies([p.x for p in pts], [p.mean for p in pts])


def main_series(series: Dict[Tuple[str, str], List[Point]]) -> Optional[Tuple[Tuple[str, str], List[Point]]]:
    """The series the model is checked on: the most GPU counts, then the largest."""
    scaling = [(k, v) for k, v in series.items() if len(v) > 1]
    return max(scaling, key=lambda kv: (len(kv[1]), kv[1][-1].x, kv[0])) if scaling else None


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


THROUGHPUT_COLUMNS = ("series", "hardware", "GPUs", "nodes", "repeats", "images/s", "std", "images/s per GPU",
                      "efficiency", "records")
HOURS_COLUMNS = ("series", "GPUs", "one epoch (h)", "{epochs} epochs (h)", "records")


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
            rows.append([name, hw, int(p.x), nodes, p.n, p.mean, p.spread, p.mean / p.x, pct(e), p.sources])
            trows.append([name, int(p.x), train_hours(p.mean), train_hours(p.mean, EPOCHS), p.sources])
    singles = {k: v for k, v in series.items() if len(v) == 1}
    more = ("\nConfigurations measured at one GPU count only (no scaling to draw):\n\n" + _config_table(singles)
            if singles else "")
    return prose("training.throughput", epochs=EPOCHS, images=IMAGENET_TRAIN_IMAGES,
                 table=md_table(THROUGHPUT_COLUMNS, rows) + more,
                 hours=md_table(HOURS_COLUMNS, trows, epochs=EPOCHS))


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
    span on the GPU's stream (hpc_imagenet.imagenet.train.metrics.StepBreakdown)."""
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


CONFIG_COLUMNS = ("configuration", "hardware", "GPUs", "repeats", "images/s", "std", "{epochs} epochs (h)", "records")


def _config_table(series: Dict[Tuple[str, str], List[Point]]) -> str:
    rows = [[name, hw, int(p.x), p.n, p.mean, p.spread, train_hours(p.mean, EPOCHS), p.sources]
            for (hw, name), pts in series.items() for p in pts]
    return md_table(CONFIG_COLUMNS, rows, epochs=EPOCHS)


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
    return prose("training.configurations", epochs=EPOCHS, images=IMAGENET_TRAIN_IMAGES,
                 table=_config_table(dict(items)))


CURVES_COLUMNS = ("run", "epoch", "train top-1 (%)", "val top-1 (%)", "train top-5 (%)", "val top-5 (%)", "record")


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
    return prose("training.curves", table=md_table(CURVES_COLUMNS, rows))


def draw(recs: Sequence[Record], page: Page) -> str:
    """The train kind's part of a tag's report: throughput against GPUs, where a step goes, the step against
    the baseline (the --setups comparisons), one GPU's targets and profile, the learning curves."""
    train = by_kind(recs, "train")
    steps = [r for r in train if r.point.setup]
    parts = [throughput_section(train_series(train), page.out_dir), breakdown_section(train),
             *[step_section(steps, page.env, page.out_dir, gpu=gpu) for gpu in sorted({r.on_gpu for r in steps})],
             gpu_step.targets_section(train), gpu_step.profile_section(train), curves_section(train, page.out_dir)]
    return "\n".join(p for p in parts if p)
