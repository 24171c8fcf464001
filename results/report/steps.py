"""Report sections: the training step against the baseline (CPU and GPU), and the first GPU targets."""
from __future__ import annotations

from pathlib import Path
from typing import List, Sequence

from results.analysis import comparisons
from results.core.kinds import Record
from results.core.setups import SETUPS
from results.report import figures
from results.report.common import Environments, data_label, md_table, pct


def step_section(train: Sequence[Record], env: Environments, fig_dir: Path, gpu: bool = False) -> str:
    rows = [x for x in comparisons.step_rows(train) if comparisons.on_gpu(x["record"]) == gpu]
    if gpu and not rows:
        return ("## GPU training step vs the baseline\n\n_(no GPU records yet: run `results/gpu_session.sh` on a "
                "GPU machine, then `results/gpu_collect.sh` and `make report`)_\n")
    multi = len({x["record"].sweep for x in rows}) > 1

    def cat(record: Record) -> str:
        p = record.point
        c = f"{data_label(p.data)}, {p.arch} {p.image_size}px\nb{p.batch_size}, {p.world_size} proc"
        return f"{c}\n[{record.sweep}]" if multi else c
    cats = list(dict.fromkeys(cat(x["record"]) for x in rows))
    setups = list(dict.fromkeys(x["record"].point.setup for x in rows))
    cell = {(cat(x["record"]), x["record"].point.setup): x for x in rows}

    def bars(metric: str, ratio: str) -> List[dict]:
        return [{"label": s, "values": [getattr(cell[(c, s)]["record"].metrics, metric) if (c, s) in cell else None
                                        for c in cats],
                 "texts": [comparisons.times(cell[(c, s)][ratio]) if (c, s) in cell and cell[(c, s)][ratio] else ""
                           for c in cats]} for s in setups]
    empty = "no --setups train records (rerun `make bench`)"
    figure = "step_time_gpu.png" if gpu else "step_time.png"
    figures.bars(fig_dir / figure, [
        {"title": "ms per training step (lower is better); labels: baseline ms / ms", "ylabel": "ms/step",
         "categories": cats, "bars": bars("step_time_ms", "step_speedup"), "empty": empty},
        {"title": "training throughput; labels: ratio to baseline", "ylabel": "images/s", "categories": cats,
         "bars": bars("images_per_s", "throughput_ratio"), "empty": empty},
    ], "Training step: pytorch/examples-style baseline vs the engine, same batch and data, "
       + ("on one GPU" if gpu else "on this CPU"))
    about = "".join(f"- `{k}`: {v.about} (`{v.variant}`, {v.precision}"
                    f"{', ' + v.amp_dtype if v.amp_dtype else ''}{', ' + ' '.join(v.flags) if v.flags else ''})\n"
                    for k, v in SETUPS.items() if k in setups)
    table = [[x["record"].point.setup, data_label(x["record"].point.data), x["record"].point.arch,
              x["record"].point.image_size, x["record"].point.batch_size,
              x["record"].metrics.world_size,
              x["record"].metrics.step_time_ms, x["record"].metrics.data_time_ms,
              x["record"].metrics.compute_time_ms, x["record"].metrics.images_per_s,
              comparisons.times(x["step_speedup"]), comparisons.times(x["throughput_ratio"]),
              x["record"].metrics.measured_steps,
              x["record"].host_load_1m, env.id(x["record"]), x["record"].source] for x in rows]
    where = ("On the GPU the loader runs in worker processes (the workers column of the command) and the "
             "targets below are checked from these records." if gpu else
             "On JPEGs the loader runs in the training process (workers 0) and its time is the data ms/step. "
             "On a CPU the step is convolution compute; bf16 autocast only pays where the CPU has native bf16 "
             "matrix units (the environment table names the CPU).")
    return (f"## {'GPU training step' if gpu else 'Training step'} vs the baseline\n\n"
            f"![step time](figures/{figure})\n\n"
            "Same model, batch, image size, data and process count; only the step configuration differs:\n\n"
            + about + "\nSpeed-up = baseline ms/step / ms/step in the same sweep (warm-up steps excluded by the "
            "engine). On synthetic data the loader does no work, so it isolates the step. " + where + "\n\n"
            + md_table(["setup", "data", "model", "image size", "batch/proc", "processes", "ms/step", "data ms/step",
                        "compute ms/step", "images/s", "speed-up vs baseline (ms/step)", "images/s vs baseline",
                        "measured steps", "host load (1 min)", "env", "record"], table)
            + (gpu_targets(train) if gpu else ""))


# The first targets for one H100: ResNet-50 AMP on synthetic data against the fp32 NCHW baseline at the
# same batch, and the real-JPEG pipeline against the same setup on synthetic data.
TARGET_SPEEDUP, TARGET_IMAGES_PER_S, TARGET_JPEG_FRACTION = 3.0, 5000.0, 0.90


def gpu_targets(train: Sequence[Record]) -> str:
    steps = [x for x in comparisons.step_rows(train) if comparisons.on_gpu(x["record"]) and x["throughput_ratio"]
             and x["record"].point.precision != "O0" and x["record"].point.data == "dummy"]
    rows = [[x["record"].point.setup, x["record"].point.arch, x["record"].environment.gpu_name,
             x["record"].metrics.images_per_s, comparisons.times(x["throughput_ratio"]),
             x["throughput_ratio"] >= TARGET_SPEEDUP,
             x["record"].metrics.images_per_s >= TARGET_IMAGES_PER_S,
             x["record"].source] for x in steps]
    jpeg = [x for x in comparisons.jpeg_vs_synthetic_rows(train) if comparisons.on_gpu(x["record"])]
    jrows = [[x["record"].point.setup, data_label(x["record"].point.data),
              x["record"].point.workers, x["record"].metrics.images_per_s,
              x["synthetic"].metrics.images_per_s, pct(x["fraction"]), x["fraction"] >= TARGET_JPEG_FRACTION,
              f"{x['record'].source} vs {x['synthetic'].source}"] for x in jpeg]
    return (f"\n### First GPU targets\n\nMixed precision on synthetic data, images/s against the `baseline` "
            f"of the same sweep "
            f"(target: at least {TARGET_SPEEDUP:g}x and {TARGET_IMAGES_PER_S:g} images/s):\n\n"
            + md_table(["setup", "model", "GPU", "images/s", "vs baseline", f">= {TARGET_SPEEDUP:g}x",
                        f">= {TARGET_IMAGES_PER_S:g} images/s", "record"], rows)
            + f"\nReal JPEG files through the engine's loader against the same setup on synthetic data, same GPU "
            f"and code; the fastest matching synthetic record is the reference (target: at least "
            f"{pct(TARGET_JPEG_FRACTION)}):\n\n"
            + md_table(["setup", "data", "loader workers", "JPEG images/s", "synthetic images/s", "fraction",
                        f">= {pct(TARGET_JPEG_FRACTION)}", "records"], jrows))
