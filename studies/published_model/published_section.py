"""Report sections: training throughput and time vs processes, and the multi-node (SLURM) points."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

from hpc_imagenet.harness.analysis.efficiency import efficiencies
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.setups import IMAGENET_TRAIN_IMAGES
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.core.setups import GROUP_KEYS
from hpc_imagenet.harness.report.common import (Environments, data_label, md_table, mib, pct, recipe_label,
                                                sorted_groups, train_hours)
from hpc_imagenet.harness.report.training import scaling_panels, train_series
from studies.published_model import words


def train_group_label(record: Record, multi_sweep: bool) -> str:
    p = record.point
    prec = record.metrics.precision_label or p.precision
    label = f"{p.variant} {p.arch} {prec} b{p.batch_size}/proc, {data_label(p.data)}{recipe_label(p)}"
    if p.setup:
        label = f"{p.setup}: {label}"
    if record.runner == "slurm":
        label += f", SLURM {p.procs_per_node or 1} proc/node"
    return f"{label} [{record.sweep}]" if multi_sweep else label


def train_groups(train: Sequence[Record]) -> Dict[str, List[dict]]:
    """Series of one sweep and one setting, sorted by world size."""
    multi = len({r.sweep for r in train}) > len({r.point_values(GROUP_KEYS) for r in train})
    return sorted_groups(train, lambda r: train_group_label(r, multi), lambda r: r.metrics.world_size)


def _scaling(train: Sequence[Record]) -> dict:
    """Series measured at more than one process count, repeats folded (see hpc_imagenet.harness.report.cluster)."""
    return {k: v for k, v in train_series(train).items() if len(v) > 1}


GPU_KINDS = ("V100", "A100", "H100")  # the published series name their GPU


def _published_panels(series: Sequence[figures.Series], decorate, ylabel: str) -> List[dict]:
    """One panel of published series per GPU kind, each series with its ideal line (DECORATE)."""
    return [{"title": f"published ResNet-50 on {kind} (reference)", "xlabel": "GPUs", "ylabel": ylabel,
             "series": decorate(mine), "xlog": True, "ylog": True}
            for kind in GPU_KINDS if (mine := [s for s in series if kind in s["label"]])]


def published_throughput(pub: dict) -> List[figures.Series]:
    out = []
    for i, run in enumerate(pub["hal_2020"]["runs"]):
        out.append({"label": f"HAL 2020 V100 ({run['label']}, Apex O2)", "x": run["gpus"],
                    "y": run["train_img_per_s"], "color": figures.palette(i)})
    for j, (cfg, pts) in enumerate(sorted(pub["nvidia_dle_2021"]["train_img_per_s"].items())):
        xs = sorted(int(k) for k in pts)
        out.append({"label": f"NVIDIA DLE 2021 {cfg}", "x": xs, "y": [pts[str(x)] for x in xs],
                    "color": figures.palette(i + 1 + j), "style": "s-"})
    return out


THROUGHPUT_COLUMNS = ("series", "processes", "nodes", "images/s", "images/s per process", "ms/step", "data ms/step",
                      "compute ms/step", "peak memory (MiB)", "epoch time (s)", "scaling efficiency",
                      "efficiency baseline (processes)", "measured steps", "warm-up steps", "host load (1 min)", "env",
                      "record")


def throughput_section(train: Sequence[Record], pub: dict, env: Environments, fig_dir: Path) -> str:
    # single-point series (the --setups comparisons) have no scaling to show: their own sections draw them
    thr, _ = scaling_panels(_scaling(train))
    figures.report_panels(fig_dir / "training_throughput.png", [*thr, *_published_panels(
        published_throughput(pub), figures.with_ideal, "training throughput (images/s)")],
        "Training throughput: one panel per hardware kind (mean and std of repeats); dotted: ideal; "
        "labels: scaling efficiency", ncols=2)
    rows = [[label, m.world_size, m.nodes, m.images_per_s, m.images_per_s_per_process, m.step_time_ms, m.data_time_ms,
             m.compute_time_ms, mib(m.peak_memory_bytes), m.epoch_time_s, pct(m.scaling_efficiency),
             m.baseline_world_size, m.measured_steps, m.warmup_steps, r.host_load_1m, env.id(r), r.source]
            for label, members in train_groups(train).items() for r in members for m in [r.metrics]]
    return words("published_section.throughput", table=md_table(THROUGHPUT_COLUMNS, rows),
                 published=published_throughput_table(pub),
                 notes="".join(f"Note recorded with points: {n}. " for n in sorted({r.note for r in train if r.note})))


PUBLISHED_COLUMNS = ("series", "GPUs", "images/s", "images/s per GPU", "efficiency vs first point")


def published_throughput_table(pub: dict) -> str:
    rows = [[s["label"], x, y, y / x, pct(e)] for s in published_throughput(pub)
            for x, y, e in zip(s["x"], s["y"], efficiencies(s["x"], s["y"]))]
    return words("published_section.published", table=md_table(PUBLISHED_COLUMNS, rows),
                 hal=pub["hal_2020"]["source"], dle=pub["nvidia_dle_2021"]["source"]) + "\n"


TIME_COLUMNS = ("series", "processes", "measured epoch time (s)", "steps/epoch", "projected ImageNet epoch (h)",
                "projected {epochs} epochs (h)", "env", "record")
PUBLISHED_TIME_COLUMNS = ("series", "GPUs", "time to train (h)")


def time_section(train: Sequence[Record], pub: dict, env: Environments, fig_dir: Path) -> str:
    epochs = pub["hal_2020"]["runs"][0]["epochs"]  # compare like with like: the published 90-epoch runs
    published = [{"label": f"HAL 2020 V100 ({run['label']}), {run['epochs']} epochs", "x": run["gpus"],
                  "y": [t / 3600 for t in run["train_time_s"]], "color": figures.palette(i)}
                 for i, run in enumerate(pub["hal_2020"]["runs"])]
    ml = pub["mlperf_training_v3_0_resnet50"]["time_to_train_min"]
    xs = sorted(int(k) for k in ml)
    published.append({"label": "MLPerf v3.0 H100 (to 75.9% top-1)", "x": xs, "y": [ml[str(x)] / 60 for x in xs],
                      "color": figures.palette(3), "style": "s-"})
    _, hours = scaling_panels(_scaling(train))
    figures.report_panels(fig_dir / "training_time.png", [*hours, *_published_panels(
        published, lambda series: figures.with_ideal(series, time=True), "time to train (hours)")],
        f"Time to train {epochs} ImageNet epochs: one panel per hardware kind; dotted: ideal; labels (published): "
        "efficiency", ncols=2)
    rows = [[label, m.world_size, m.epoch_time_s, r.point.steps_per_epoch, train_hours(m.images_per_s),
             train_hours(m.images_per_s, epochs), env.id(r), r.source]
            for label, members in train_groups(train).items() for r in members for m in [r.metrics]]
    pub_rows = [[s["label"], x, y] for s in published for x, y in zip(s["x"], s["y"])]
    return words("published_section.time", images=IMAGENET_TRAIN_IMAGES, epochs=epochs,
                 table=md_table(TIME_COLUMNS, rows, epochs=epochs),
                 published=md_table(PUBLISHED_TIME_COLUMNS, pub_rows),
                 hal=pub["hal_2020"]["source"], mlperf=pub["mlperf_training_v3_0_resnet50"]["source"]) + "\n"


def multinode_records(train: Sequence[Record]) -> List[dict]:
    """Train records that ran as SLURM jobs, by sweep then node count."""
    recs = [r for r in train if r.runner == "slurm"]
    return sorted(recs, key=lambda r: (r.sweep, r.metrics.nodes or 0, r.metrics.world_size))


MULTINODE_COLUMNS = ("sweep", "nodes", "processes", "rank-0 host", "backend", "images/s", "images/s per process",
                     "ms/step", "data ms/step", "compute ms/step", "scaling efficiency", "SLURM job",
                     "host load (1 min)", "env", "record")


def multinode_section(train: Sequence[Record], env: Environments) -> str:
    recs = multinode_records(train)
    rows = [[r.sweep, r.metrics.nodes, r.metrics.world_size, r.environment.hostname,
             r.metrics.backend, r.metrics.images_per_s, r.metrics.images_per_s_per_process,
             r.metrics.step_time_ms, r.metrics.data_time_ms, r.metrics.compute_time_ms,
             pct(r.metrics.scaling_efficiency), r.environment.slurm_job_id,
             r.host_load_1m, env.id(r), r.source] for r in recs]
    notes = "".join(f"\n{n}.\n" for n in sorted({r.note for r in recs if r.note}))
    return words("published_section.multinode", notes=notes,
                 table=md_table(MULTINODE_COLUMNS, rows))
