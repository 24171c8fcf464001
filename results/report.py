"""Records + TensorBoard events -> ``results/figures/*.png`` and ``results/RESULTS.md``.

    python -m results.report                      # all of results/records/*.jsonl
    python -m results.report --records FILE.jsonl --out DIR

Every number in the report comes from a record, a run's TensorBoard events, or the published
reference data in ``results/reference/`` (with its source); each figure is followed by the table
it was drawn from, and each row names its record's environment. Records that cannot be used are
listed, not dropped. Output is deterministic (no timestamps), so regenerating the committed
report from the committed records changes nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from results import comparisons as cmp, figures, records, report_data_scale, scaling_model as sm
from results.allreduce_bench import fit_alpha_beta
from results.train_bench import GROUP_KEYS, add_efficiency, parameter_count

log = logging.getLogger(__name__)

RESULTS = records.RESULTS_DIR
REPO = RESULTS.parent
REFERENCE = RESULTS / "reference"
IMAGENET_TRAIN_IMAGES = 1_281_167  # ILSVRC-2012 training set size: converts images/s to epoch time
CURVES = {"top1_train": ("Top1/train", "train top-1 (%)"), "top1_val": ("Top1/val", "validation top-1 (%)"),
          "top5_train": ("Top5/train", "train top-5 (%)"), "top5_val": ("Top5/val", "validation top-5 (%)")}


class ReportError(RuntimeError):
    """Bad input; one line naming the problem and the fix."""


# ---------------------------------------------------------------- formatting

def fmt(v: object) -> str:
    """One number format for every table, so tests can compare cells with records."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v).replace("|", "\\|")


def pct(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{100 * v + 0.0:.1f}%".replace("-0.0%", "0.0%")  # no negative zero from rounding


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    if not rows:
        return "_(no rows)_\n"
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- environments

ENV_COLUMNS = ("hostname", "cpu_model", "cpu_count", "torch_threads", "gpu_name", "gpu_count", "nodes", "torch", "torchvision",
               "cuda", "cudnn", "nccl", "python", "git_commit", "slurm_job_id")


class Environments:
    """Short ids (E1, E2, ...) for distinct environments; the command line is per record."""

    def __init__(self) -> None:
        self.ids: Dict[str, str] = {}
        self.envs: Dict[str, dict] = {}

    def id(self, rec: dict) -> str:
        env = {k: rec["environment"].get(k) for k in ENV_COLUMNS}
        key = hashlib.sha1(json.dumps(env, sort_keys=True, default=str).encode()).hexdigest()
        if key not in self.ids:
            self.ids[key] = f"E{len(self.ids) + 1}"
            self.envs[self.ids[key]] = env
        return self.ids[key]

    def table(self) -> str:
        rows = [[i] + [fmt(e.get(k)) for k in ENV_COLUMNS] for i, e in self.envs.items()]
        return md_table(["env", *ENV_COLUMNS], rows)


# ---------------------------------------------------------------- inputs

def load_reference(ref_dir: Path = REFERENCE) -> Tuple[dict, dict]:
    try:
        pub = json.loads((ref_dir / "published_resnet50.json").read_text())
        links = json.loads((ref_dir / "links.json").read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot read the reference data in {ref_dir} ({e}); restore results/reference/ "
                          "from git") from None
    return pub, links


def by_kind(recs: Sequence[dict], kind: str, ok: bool = True) -> List[dict]:
    return [r for r in recs if r["kind"] == kind and (r["status"] == "ok") == ok]


def data_label(d: object) -> str:
    return "synthetic" if d == "dummy" else Path(str(d)).name


def train_group_label(r: dict, multi_sweep: bool) -> str:
    p = r["point"]
    prec = r["metrics"].get("precision_label") or p.get("precision")
    label = f"{p['variant']} {p['arch']} {prec} b{p['batch_size']}/proc, {data_label(p['data'])}"
    if p.get("setup"):
        label = f"{p['setup']}: {label}"
    if r.get("runner") == "slurm":
        label += f", SLURM {p.get('procs_per_node', 1)} proc/node"
    return f"{label} [{r['sweep']}]" if multi_sweep else label


def plain_local(r: dict) -> bool:
    """A local sweep point that is not a --setups comparison (learning curves, the scaling model)."""
    return not r["point"].get("setup") and r.get("runner", "local") == "local"


def train_groups(train: Sequence[dict]) -> Dict[str, List[dict]]:
    """Series of one sweep and one setting, sorted by world size."""
    multi = len({r["sweep"] for r in train}) > len({tuple(r["point"].get(k) for k in GROUP_KEYS) for r in train})
    groups: Dict[str, List[dict]] = {}
    for r in train:
        groups.setdefault(train_group_label(r, multi), []).append(r)
    return {k: sorted(v, key=lambda r: r["metrics"]["world_size"]) for k, v in sorted(groups.items())}


# ---------------------------------------------------------------- training throughput and time

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


def with_ideal(series: Sequence[figures.Series]) -> List[figures.Series]:
    """Each series plus its ideal linear line and efficiency labels relative to its first point."""
    out = []
    for i, s in enumerate(series):
        x0, y0 = s["x"][0], s["y"][0]
        s = dict(s, labels=[f"{100 * (y / x) / (y0 / x0):.0f}%" for x, y in zip(s["x"], s["y"])])
        out += [s, figures.ideal_line(x0, y0, list(s["x"]), i == 0, s.get("color"))]
    return out


def throughput_section(train: Sequence[dict], pub: dict, env: Environments, fig_dir: Path) -> str:
    groups = train_groups(train)
    # single-point series (the --setups comparisons) have no scaling to show: their own section draws them
    ours = [{"label": k, "x": [r["metrics"]["world_size"] for r in v], "y": [r["metrics"]["images_per_s"] for r in v],
             "color": figures.palette(i)} for i, (k, v) in enumerate(groups.items()) if len(v) > 1]
    figures.scaling_panels(fig_dir / "training_throughput.png", [
        {"title": "this project (measured, warm-up excluded)", "xlabel": "processes (GPUs)",
         "ylabel": "training throughput (images/s)", "series": with_ideal(ours),
         "empty": "no successful train records"},
        {"title": "published ResNet-50 (reference)", "xlabel": "GPUs", "ylabel": "training throughput (images/s)",
         "series": with_ideal(published_throughput(pub)), "legend_loc": "upper left"},
    ], "Training throughput vs processes/GPUs; labels: scaling efficiency vs the first point")
    rows = []
    for label, members in groups.items():
        for r in members:
            m = r["metrics"]
            rows.append([label, m["world_size"], m.get("nodes"), m["images_per_s"], m["images_per_s_per_process"],
                         m["step_time_ms"], m.get("data_time_ms"), m.get("compute_time_ms"),
                         _mib(m.get("peak_memory_bytes")), m.get("epoch_time_s"), pct(m.get("scaling_efficiency")),
                         m.get("baseline_world_size"), m.get("measured_steps"), m.get("warmup_steps"),
                         r.get("host_load_1m"), env.id(r), r["_source"]])
    table = md_table(["series", "processes", "nodes", "images/s", "images/s per process", "ms/step", "data ms/step",
                      "compute ms/step", "peak memory (MiB)", "epoch time (s)", "scaling efficiency",
                      "efficiency baseline (processes)", "measured steps", "warm-up steps", "host load (1 min)",
                      "env", "record"], rows)
    notes = sorted({r["note"] for r in train if r.get("note")})
    return ("## Training throughput\n\n![training throughput](figures/training_throughput.png)\n\n"
            "The figure draws series with more than one process count; single-point series are in the table "
            "and in the step-time comparison. Series marked SLURM ran as one batch job per point (multi-node: "
            "see below). " + "".join(f"Note recorded with points: {n}. " for n in notes)
            + "\n\nMeasured points (steady state: the engine excludes its warm-up steps). Scaling efficiency = "
            "(images/s per process) / (the same at the sweep's smallest process count). Host load is the "
            "1-minute load average when the point was recorded: on a shared machine a load above the core "
            "count means other work competed for the cores.\n\n" + table
            + "\n" + published_throughput_table(pub))


def _mib(v: Optional[float]) -> Optional[float]:
    return None if v is None else v / (1 << 20)


def published_throughput_table(pub: dict) -> str:
    rows = []
    for s in published_throughput(pub):
        x0, y0 = s["x"][0], s["y"][0]
        for x, y in zip(s["x"], s["y"]):
            rows.append([s["label"], x, y, y / x, pct((y / x) / (y0 / x0))])
    src = f"Sources: {pub['hal_2020']['source']}; {pub['nvidia_dle_2021']['source']}."
    return ("Published reference (as published; per-GPU rate and efficiency derived):\n\n"
            + md_table(["series", "GPUs", "images/s", "images/s per GPU", "efficiency vs first point"], rows)
            + "\n" + src + "\n")


def time_section(train: Sequence[dict], pub: dict, env: Environments, fig_dir: Path) -> str:
    epochs = pub["hal_2020"]["runs"][0]["epochs"]  # compare like with like: the published 90-epoch runs
    groups = train_groups(train)
    ours = []
    for i, (label, members) in enumerate(g for g in groups.items() if len(g[1]) > 1):
        hours = [epochs * IMAGENET_TRAIN_IMAGES / r["metrics"]["images_per_s"] / 3600 for r in members]
        ours.append({"label": label, "x": [r["metrics"]["world_size"] for r in members], "y": hours,
                     "color": figures.palette(i)})
    published = [{"label": f"HAL 2020 V100 ({run['label']}), {run['epochs']} epochs", "x": run["gpus"],
                  "y": [t / 3600 for t in run["train_time_s"]], "color": figures.palette(i)}
                 for i, run in enumerate(pub["hal_2020"]["runs"])]
    ml = pub["mlperf_training_v3_0_resnet50"]["time_to_train_min"]
    xs = sorted(int(k) for k in ml)
    published.append({"label": "MLPerf v3.0 H100 (to 75.9% top-1)", "x": xs, "y": [ml[str(x)] / 60 for x in xs],
                      "color": figures.palette(3), "style": "s-"})

    def ideal_time(series):
        out = []
        for s in series:
            x0, y0 = s["x"][0], s["y"][0]
            eff = [f"{100 * (y0 * x0) / (y * x):.0f}%" for x, y in zip(s["x"], s["y"])]
            out += [dict(s, labels=eff), {"label": figures.IDEAL_LABEL if not out else "_nolegend_", "x": s["x"],
                                          "y": [y0 * x0 / x for x in s["x"]], "style": ":", "color": s["color"]}]
        return out
    figures.scaling_panels(fig_dir / "training_time.png", [
        {"title": f"this project: {epochs} ImageNet epochs at the measured rate", "xlabel": "processes (GPUs)",
         "ylabel": "time to train (hours)", "series": ideal_time(ours), "empty": "no successful train records"},
        {"title": "published ResNet-50 (reference)", "xlabel": "GPUs", "ylabel": "time to train (hours)",
         "series": ideal_time(published), "legend_loc": "lower left"},
    ], "Training time vs processes/GPUs; labels: efficiency vs the first point")
    rows = []
    for label, members in groups.items():
        for r in members:
            m = r["metrics"]
            rows.append([label, m["world_size"], m.get("epoch_time_s"), r["point"].get("steps_per_epoch"),
                         IMAGENET_TRAIN_IMAGES / m["images_per_s"] / 3600,
                         epochs * IMAGENET_TRAIN_IMAGES / m["images_per_s"] / 3600, env.id(r), r["_source"]])
    pub_rows = [[s["label"], x, y] for s in published for x, y in zip(s["x"], s["y"])]
    return (f"## Training time\n\n![training time](figures/training_time.png)\n\nOur runs are short (a few steps "
            f"per epoch), so the time for a full ImageNet epoch ({IMAGENET_TRAIN_IMAGES} images) and for "
            f"{epochs} epochs is projected from the measured images/s; the measured (short) epoch time is shown "
            "too.\n\n" + md_table(["series", "processes", "measured epoch time (s)", "steps/epoch",
                                   "projected ImageNet epoch (h)", f"projected {epochs} epochs (h)", "env",
                                   "record"], rows)
            + "\nPublished (hours):\n\n" + md_table(["series", "GPUs", "time to train (h)"], pub_rows)
            + f"\nSources: {pub['hal_2020']['source']}; {pub['mlperf_training_v3_0_resnet50']['source']}.\n")


# ---------------------------------------------------------------- learning curves

def read_curves(run_dir: Path) -> Dict[str, List[Tuple[int, float]]]:
    """Epoch scalars from a run's TensorBoard events; run.json epochs when there are none."""
    out: Dict[str, List[Tuple[int, float]]] = {}
    if any(run_dir.glob("events.out.tfevents*")):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        logging.getLogger("tensorboard").setLevel(logging.WARNING)  # "No path found after ..." chatter
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags().get("scalars", []))
        for tag, _ in CURVES.values():
            if tag in tags:
                out[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
        if out:
            return out
    run_json = run_dir / "run.json"
    if run_json.exists():
        epochs = json.loads(run_json.read_text()).get("epochs", [])
        keys = {"Top1/train": "train_top1", "Top1/val": "val_top1", "Top5/train": "train_top5", "Top5/val": "val_top5"}
        for tag, key in keys.items():
            out[tag] = [(e["epoch"], e[key]) for e in epochs if e.get(key) is not None]
    return out


def curve_runs(train: Sequence[dict], problems: List[records.Problem]) -> List[Tuple[str, dict, dict]]:
    """(label, record, curves) for runs with kept events; real-data runs when any exist."""
    with_dir = [r for r in train if r.get("run_dir") and plain_local(r)]
    real = [r for r in with_dir if r["point"].get("data") != "dummy"]
    out = []
    for r in (real or with_dir):
        d = REPO / r["run_dir"]
        c = read_curves(d) if d.is_dir() else {}
        if not c:
            problems.append(records.Problem(r["_source"], 0, f"learning curves: no events or run.json in {d}"))
            continue
        label = f"{r['metrics']['world_size']} process(es), {data_label(r['point']['data'])}"
        out.append((label, r, c))
    return sorted(out, key=lambda t: (t[1]["point"].get("data") != "dummy", t[1]["metrics"]["world_size"]))


def curves_section(train: Sequence[dict], env: Environments, fig_dir: Path, problems: List) -> str:
    runs = curve_runs(train, problems)
    for name, (tag, ylabel) in CURVES.items():
        series = [{"label": label, "x": [s for s, _ in c.get(tag, [])], "y": [v for _, v in c.get(tag, [])],
                   "color": figures.palette(i)} for i, (label, _, c) in enumerate(runs) if c.get(tag)]
        figures.curves(fig_dir / f"{name}.png", series, ylabel, f"{ylabel.split(' (')[0]} per epoch "
                       "(TensorBoard events of rank 0)")
    rows = []
    for label, r, c in runs:
        epochs = sorted({s for tag, _ in CURVES.values() for s, _ in c.get(tag, [])})
        val = {tag: dict(c.get(tag, [])) for tag, _ in CURVES.values()}
        for e in epochs:
            rows.append([label, e] + [val[tag].get(e) for tag, _ in CURVES.values()] + [env.id(r), r["run_dir"]])
    figs = "\n".join(f"![{n}](figures/{n}.png)" for n in CURVES)
    return ("## Learning curves\n\n" + figs + "\n\nOne curve per process count (the quick preset trains a few "
            "epochs on the small generated demo set, so these show the pipeline, not ImageNet accuracy).\n\n"
            + md_table(["run", "epoch", "train top-1 (%)", "val top-1 (%)", "train top-5 (%)", "val top-5 (%)",
                        "env", "events"], rows))


# ---------------------------------------------------------------- comparisons with the baselines

def _io_category(r: dict, multi_sweep: bool) -> str:
    p = r["point"]
    cat = f"{p['workers']} workers, {p['cache']}"
    return f"{cat}\n[{r['sweep']}]" if multi_sweep else cat


def steady_pipeline_table(steady: Sequence[dict], env: Environments) -> str:
    """The lockstep, steady-state records (``results.bench pipeline``): the per-core ratio that counts."""
    if not steady:
        return "_(no steady-state pipeline records yet: run `python -m results.bench pipeline`)_\n"
    rows = [[r["point"]["backend"], r["point"]["split"], r["point"]["workers"], r["point"]["image_size"],
             r["point"]["images"], r["metrics"]["rounds"], r["metrics"]["cpu_ms_per_image"],
             r["metrics"]["images_per_cpu_s"], r["metrics"]["images_per_s"], cmp.times(r["metrics"].get("ratio_per_core")),
             (f"{cmp.times(r['metrics']['ratio_min'])}-{cmp.times(r['metrics']['ratio_max'])}"
              if r["metrics"].get("ratio_min") else "-"), r.get("host_load_1m"), env.id(r), r["_source"]]
            for r in sorted(steady, key=lambda r: (r["sweep"], r["point"]["split"], r["point"]["workers"],
                                                   r["point"]["backend"]))]
    return md_table(["backend", "split", "workers", "image size", "images", "rounds", "CPU ms/image",
                     "images/s per core", "images/s wall", "per-core ratio vs baseline (median of rounds)",
                     "ratio range", "host load (1 min)", "env", "record"], rows)


def pipeline_section(io: Sequence[dict], steady: Sequence[dict], env: Environments, fig_dir: Path) -> str:
    rows = cmp.pipeline_rows(io)
    multi = len({x["record"]["sweep"] for x in rows}) > 1
    cats = list(dict.fromkeys(_io_category(x["record"], multi) for x in rows))
    backends = sorted({x["record"]["point"]["backend"] for x in rows})

    def panel(metric: str, ylabel: str, title: str, ratio: Optional[str]) -> dict:
        cell = {(_io_category(x["record"], multi), x["record"]["point"]["backend"]): x for x in rows}
        bars = [{"label": b, "values": [cell[(c, b)]["record"]["metrics"][metric] if (c, b) in cell else None
                                        for c in cats],
                 "texts": [cmp.times(cell[(c, b)][ratio]) if ratio and (c, b) in cell and cell[(c, b)][ratio]
                           else "" for c in cats]} for b in backends]
        return {"title": title, "ylabel": ylabel, "categories": cats, "bars": bars,
                "empty": "no io records with CPU accounting (rerun `python -m results.bench io`)"}
    figures.bars(fig_dir / "pipeline_per_core.png", [
        panel("images_per_cpu_s", "images/s per core (images per CPU second)",
              "per core: labels = ratio to the baseline backend", "per_core_ratio"),
        panel("images_per_s", "images/s (wall clock, one reader)", "wall clock: labels = ratio to baseline",
              "wall_ratio"),
    ], "Data pipeline by backend: decode + train augmentation, one reader, same JPEGs")
    table = [[x["record"]["point"]["backend"], x["record"]["point"]["cache"], x["record"]["point"]["workers"],
              x["record"]["point"]["image_size"], x["record"]["metrics"]["images"], x["record"]["metrics"].get("bytes_per_image"),
              x["record"]["metrics"]["images_per_s"], x["record"]["metrics"]["cpu_ms_per_image"],
              x["record"]["metrics"]["images_per_cpu_s"], x["record"]["metrics"]["cores_busy"],
              cmp.times(x["per_core_ratio"]), cmp.times(x["wall_ratio"]), x["record"].get("host_load_1m"),
              env.id(x["record"]), x["record"]["_source"]] for x in rows]
    return ("## Data pipeline vs the baseline\n\n![pipeline per core](figures/pipeline_per_core.png)\n\n"
            "Each backend reads the same generated ImageNet-like JPEGs (`results/jpegs.py`: 500x375, ~110 KB) "
            "in the same order with the same train augmentation (random-resized crop to the image size + "
            "flip). CPU = user + system seconds of the reader and its DataLoader workers (`getrusage`, "
            "workers counted once reaped); images/s per core = images / CPU seconds. Ratios are to the "
            f"`{cmp.PIPELINE_BASELINE}` backend (pytorch/examples: PIL + ToTensor + Normalize, float) of "
            "the same sweep, cache state and worker count. With workers > 0 the per-core figure includes "
            "starting the workers and moving batches through their pipes. What limits the next gain: the "
            "`fast` backend already decodes only the crop's rows at a reduced DCT scale, but libjpeg must "
            "still entropy-decode every row above the crop, and entropy decoding (which DCT scaling cannot "
            "reduce) is most of a JPEG decode (see `imagenet/pipelines.py`). At 224 px on 500x375 images no "
            "crop is twice the output size, so DCT scaling never applies there and only the rows below the "
            "crop are saved; the next gains are decoding off the CPU (nvJPEG/DALI) or a pre-processed "
            "dataset format.\n\n"
            + md_table(["backend", "cache", "workers", "image size", "images", "bytes/image", "images/s",
                        "CPU ms/image", "images/s per core", "cores busy", "per-core ratio vs baseline",
                        "wall ratio vs baseline", "host load (1 min)", "env", "record"], table)
            + "\n### Steady state, backends in lockstep\n\nThe figures above include one-off costs (DataLoader "
            "and worker start-up, first calls), which short passes do not amortise. `python -m results.bench "
            "pipeline` measures the steady state instead: with 0 workers the backends take turns batch by "
            "batch on the same files, each timed by the thread's CPU clock, so busy moments of a shared "
            "machine fall on all alike; with workers, a first pass starts them and the second is measured "
            "(CPU of this process and the workers). Each round gives a ratio to the baseline; the median "
            "over rounds is shown with its range.\n\n" + steady_pipeline_table(steady, env))


def step_section(train: Sequence[dict], env: Environments, fig_dir: Path, gpu: bool = False) -> str:
    rows = [x for x in cmp.step_rows(train) if cmp.on_gpu(x["record"]) == gpu]
    if gpu and not rows:
        return ("## GPU training step vs the baseline\n\n_(no GPU records yet: run `results/gpu_session.sh` on a "
                "GPU machine, then `results/gpu_collect.sh` and `make report`)_\n")
    multi = len({x["record"]["sweep"] for x in rows}) > 1

    def cat(r: dict) -> str:
        p = r["point"]
        c = f"{data_label(p['data'])}, {p['arch']} {p['image_size']}px\nb{p['batch_size']}, {p['world_size']} proc"
        return f"{c}\n[{r['sweep']}]" if multi else c
    cats = list(dict.fromkeys(cat(x["record"]) for x in rows))
    setups = list(dict.fromkeys(x["record"]["point"]["setup"] for x in rows))
    cell = {(cat(x["record"]), x["record"]["point"]["setup"]): x for x in rows}

    def bars(metric: str, ratio: str) -> List[dict]:
        return [{"label": s, "values": [cell[(c, s)]["record"]["metrics"][metric] if (c, s) in cell else None
                                        for c in cats],
                 "texts": [cmp.times(cell[(c, s)][ratio]) if (c, s) in cell and cell[(c, s)][ratio] else ""
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
    from results.train_bench import SETUPS
    about = "".join(f"- `{k}`: {v.about} (`{v.variant}`, {v.precision}"
                    f"{', ' + v.amp_dtype if v.amp_dtype else ''}{', ' + ' '.join(v.flags) if v.flags else ''})\n"
                    for k, v in SETUPS.items() if k in setups)
    table = [[x["record"]["point"]["setup"], data_label(x["record"]["point"]["data"]), x["record"]["point"]["arch"],
              x["record"]["point"]["image_size"], x["record"]["point"]["batch_size"], x["record"]["metrics"]["world_size"],
              x["record"]["metrics"]["step_time_ms"], x["record"]["metrics"].get("data_time_ms"),
              x["record"]["metrics"].get("compute_time_ms"), x["record"]["metrics"]["images_per_s"],
              cmp.times(x["step_speedup"]), cmp.times(x["throughput_ratio"]), x["record"]["metrics"].get("measured_steps"),
              x["record"].get("host_load_1m"), env.id(x["record"]), x["record"]["_source"]] for x in rows]
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


# Issue 6's targets for one H100: ResNet-50 AMP on synthetic data against the fp32 NCHW baseline at the
# same batch, and the real-JPEG pipeline against the same setup on synthetic data.
TARGET_SPEEDUP, TARGET_IMAGES_PER_S, TARGET_JPEG_FRACTION = 3.0, 5000.0, 0.90


def gpu_targets(train: Sequence[dict]) -> str:
    def met(ok: bool) -> str:
        return "yes" if ok else "no"
    steps = [x for x in cmp.step_rows(train) if cmp.on_gpu(x["record"]) and x["throughput_ratio"]
             and x["record"]["point"]["precision"] != "O0" and x["record"]["point"]["data"] == "dummy"]
    rows = [[x["record"]["point"]["setup"], x["record"]["point"]["arch"], x["record"]["environment"].get("gpu_name"),
             x["record"]["metrics"]["images_per_s"], cmp.times(x["throughput_ratio"]),
             met(x["throughput_ratio"] >= TARGET_SPEEDUP), met(x["record"]["metrics"]["images_per_s"] >= TARGET_IMAGES_PER_S),
             x["record"]["_source"]] for x in steps]
    jpeg = [x for x in cmp.jpeg_vs_synthetic_rows(train) if cmp.on_gpu(x["record"])]
    jrows = [[x["record"]["point"]["setup"], data_label(x["record"]["point"]["data"]),
              x["record"]["point"]["workers"], x["record"]["metrics"]["images_per_s"],
              x["synthetic"]["metrics"]["images_per_s"], pct(x["fraction"]), met(x["fraction"] >= TARGET_JPEG_FRACTION),
              f"{x['record']['_source']} vs {x['synthetic']['_source']}"] for x in jpeg]
    return (f"\n### Issue 6's GPU targets\n\nMixed precision on synthetic data, images/s against the `baseline` "
            f"of the same sweep "
            f"(target: at least {TARGET_SPEEDUP:g}x and {TARGET_IMAGES_PER_S:g} images/s):\n\n"
            + md_table(["setup", "model", "GPU", "images/s", "vs baseline", f">= {TARGET_SPEEDUP:g}x",
                        f">= {TARGET_IMAGES_PER_S:g} images/s", "record"], rows)
            + f"\nReal JPEG files through the engine's loader against the same setup on synthetic data, same GPU "
            f"and code; the fastest matching synthetic record is the reference (target: at least "
            f"{pct(TARGET_JPEG_FRACTION)}):\n\n"
            + md_table(["setup", "data", "loader workers", "JPEG images/s", "synthetic images/s", "fraction",
                        f">= {pct(TARGET_JPEG_FRACTION)}", "records"], jrows))


def multinode_section(train: Sequence[dict], env: Environments) -> str:
    recs = cmp.multinode_records(train)
    rows = [[r["sweep"], r["metrics"].get("nodes"), r["metrics"]["world_size"], r["environment"].get("hostname"),
             r["metrics"].get("backend"), r["metrics"]["images_per_s"], r["metrics"]["images_per_s_per_process"],
             r["metrics"]["step_time_ms"], r["metrics"].get("data_time_ms"), r["metrics"].get("compute_time_ms"),
             pct(r["metrics"].get("scaling_efficiency")), r["environment"].get("slurm_job_id"),
             r.get("host_load_1m"), env.id(r), r["_source"]] for r in recs]
    notes = "".join(f"\n{n}.\n" for n in sorted({r["note"] for r in recs if r.get("note")}))
    return ("## Multi-node scaling (SLURM)\n\nOne batch job per point (`python -m results.bench cluster-scaling`, "
            "or `train --submit slurm`), drawn as the SLURM series in the throughput figure below. Efficiency = "
            "(images/s per process) / (the same at the sweep's smallest node count); hostname is rank 0's "
            "node.\n" + notes + "\n"
            + md_table(["sweep", "nodes", "processes", "rank-0 host", "backend", "images/s", "images/s per process",
                        "ms/step", "data ms/step", "compute ms/step", "scaling efficiency", "SLURM job",
                        "host load (1 min)", "env", "record"], rows))


def _newest_sweep(items: Sequence[dict], record_of=lambda x: x) -> List[dict]:
    """The items of the newest sweep among ITEMS: by record time (sweep ids start with their tag, so
    they sort by tag first), the sweep id breaking ties."""
    if not items:
        return []
    newest = max(items, key=lambda x: (record_of(x)["time"], record_of(x)["sweep"]))
    return [x for x in items if record_of(x)["sweep"] == record_of(newest)["sweep"]]


def summary_section(train: Sequence[dict], io: Sequence[dict], overlap: Sequence[dict] = (),
                    steady: Sequence[dict] = ()) -> str:
    """The headline ratios, each from the newest sweep that has it, with the load at the time."""
    lines = []
    ratios = [r for r in steady if r["metrics"].get("ratio_per_core") and r["point"]["backend"] != "baseline"]
    for r in _newest_sweep(ratios):
        p, m = r["point"], r["metrics"]
        lines.append(f"- Data pipeline, steady state, `{p['backend']}` vs `baseline` ({p['split']}, "
                     f"{p['workers']} workers, {p['image_size']}px, {p['images']} images x {m['rounds']} "
                     f"rounds in lockstep): {cmp.times(m['ratio_per_core'])} images/s per core (range "
                     f"{cmp.times(m['ratio_min'])}-{cmp.times(m['ratio_max'])}); host load "
                     f"{fmt(r.get('host_load_1m'))} (`{r['_source']}`)")
    # the engine's default backend; the other backends are in the section's table and figure
    pipe = [x for x in cmp.pipeline_rows(io) if x["per_core_ratio"] and x["record"]["point"]["backend"] == "fast"]
    for x in _newest_sweep(pipe, lambda x: x["record"]):
        p, m = x["record"]["point"], x["record"]["metrics"]
        lines.append(f"- Data pipeline, `{p['backend']}` vs `baseline` ({p['workers']} workers, {p['cache']} "
                     f"cache, {p['image_size']}px): {cmp.times(x['per_core_ratio'])} images/s per core "
                     f"({fmt(m['images_per_cpu_s'])} vs {fmt(x['baseline']['metrics']['images_per_cpu_s'])}), "
                     f"{cmp.times(x['wall_ratio'])} wall images/s; host load {fmt(x['record'].get('host_load_1m'))} "
                     f"(`{x['record']['_source']}`)")
    steps = [x for x in cmp.step_rows(train) if x["step_speedup"] and x["record"]["point"]["setup"] != "baseline"]

    def kind(x: dict) -> tuple:  # the newest sweep of each device and kind of data: a GPU sweep hides no CPU one
        return cmp.on_gpu(x["record"]), x["record"]["point"]["data"] == "dummy"
    newest = {k: _newest_sweep([x for x in steps if kind(x) == k], lambda x: x["record"])[0]["record"]["sweep"]
              for k in {kind(x) for x in steps}}
    for x in (x for x in steps if x["record"]["sweep"] == newest[kind(x)]):
        p, m = x["record"]["point"], x["record"]["metrics"]
        lines.append(f"- Training step, `{p['setup']}` vs `baseline` ({data_label(p['data'])}, {p['arch']} "
                     f"{p['image_size']}px, batch {p['batch_size']}, {p['world_size']} process, "
                     f"{m.get('device')}): {cmp.times(x['step_speedup'])} ({fmt(m['step_time_ms'])} vs "
                     f"{fmt(x['baseline']['metrics']['step_time_ms'])} ms/step); host load "
                     f"{fmt(x['record'].get('host_load_1m'))} (`{x['record']['_source']}`)")
    for x in cmp.logging_rows(train):
        p, m, q = x["record"]["point"], x["record"]["metrics"], x["quiet"]["metrics"]
        lines.append(f"- Logging overhead ({data_label(p['data'])}, {p['arch']} {p['image_size']}px, batch "
                     f"{p['batch_size']}, {m.get('device')}): printing and TensorBoard step scalars at every step "
                     f"cost {100 * x['overhead']:+.1f}% step time ({fmt(m['step_time_ms'])} vs "
                     f"{fmt(q['step_time_ms'])} ms/step logging once per epoch); host load "
                     f"{fmt(x['record'].get('host_load_1m'))} (`{x['record']['_source']}`)")
    for r in _newest_sweep(overlap):
        p, m = r["point"], r["metrics"]
        lines.append(f"- DDP communication overlap ({p['arch']} {p['image_size']}px, batch {p['batch_size']}, "
                     f"{p['world_size']} gloo processes, {p['bucket_cap_mb']:g} MB buckets): "
                     f"{fmt(m['exposed_comm_ms'])} ms of the {fmt(m['allreduce_alone_ms'])} ms gradient "
                     f"all-reduce stays exposed per step ({100 * m['hidden_fraction']:.0f}% hidden; step "
                     f"{fmt(m['step_time_ms'])} ms); host load {fmt(r.get('host_load_1m'))} (`{r['_source']}`)")
    nodes = cmp.multinode_records(train)
    if nodes:
        newest = _newest_sweep(nodes)
        lines.append("- Multi-node gloo DDP (SLURM test cluster, " + newest[0]["point"]["arch"] + "): " + "; ".join(
            f"{r['metrics'].get('nodes')} node(s) {fmt(r['metrics']['images_per_s'])} images/s, efficiency "
            f"{pct(r['metrics'].get('scaling_efficiency'))}, host load {fmt(r.get('host_load_1m'))}" for r in newest))
    return "## Summary\n\nComputed from the records below (newest sweep of each kind):\n\n" + (
        "\n".join(lines) + "\n" if lines else "_(no comparison records yet)_\n")


# ---------------------------------------------------------------- I/O

def io_section(io: Sequence[dict], pub: dict, env: Environments, fig_dir: Path) -> str:
    def series(sweep_key: str, metric: str) -> List[figures.Series]:
        groups: Dict[Tuple[str, str], List[dict]] = {}
        for r in io:
            groups.setdefault((r["point"]["backend"], r["point"]["cache"]), []).append(r)
        backends = sorted({b for b, _ in groups})
        out = []
        for (b, cache), rs in sorted(groups.items()):
            rs = _io_sweep(rs, sweep_key)
            if rs:
                out.append({"label": f"{b}, {cache} cache", "x": [r["point"][sweep_key] for r in rs],
                            "y": [r["metrics"][metric] for r in rs], "color": figures.palette(backends.index(b)),
                            "style": "o-" if cache == "warm" else "s--"})
        return out
    panels = [
        {"title": "one reader: loader workers", "xlabel": "DataLoader workers", "ylabel": "images/s",
         "series": series("workers", "images_per_s"), "int_x": True, "ymin0": True},
        {"title": "one reader: loader workers", "xlabel": "DataLoader workers", "ylabel": "MB/s (file bytes read)",
         "series": series("workers", "mb_per_s"), "int_x": True, "ymin0": True},
        {"title": "concurrent readers (as ranks on one node)", "xlabel": "reader processes",
         "ylabel": "images/s (all readers)", "series": series("readers", "images_per_s"), "int_x": True,
         "ymin0": True},
        {"title": "concurrent readers (as ranks on one node)", "xlabel": "reader processes",
         "ylabel": "MB/s (all readers)", "series": series("readers", "mb_per_s"), "int_x": True,
         "ymin0": True},
    ]
    for p in panels:
        p["empty"] = "no io records"
    figures.grid(fig_dir / "IO.png", panels, "Data loading without a model (decode + augment to 224x224)")
    rows = []
    for r in sorted(io, key=lambda r: (r["point"]["backend"], r["point"]["cache"], r["point"]["readers"],
                                       r["point"]["workers"])):
        p, m = r["point"], r["metrics"]
        rows.append([p["backend"], p["cache"], p["workers"], p["readers"], m["images"], m["images_per_s"],
                     m["mb_per_s"], m.get("files_per_s"), m.get("storage_mb_per_s"), m.get("syscr_per_s"),
                     m.get("bytes_per_image"), m.get("first_batch_s"), m.get("cold_verified"),
                     m.get("cache_method"), r.get("host_load_1m"), env.id(r), r["_source"]])
    hal = pub["hal_2020"]["io_64gpu"]
    feb = pub["hal_2020"]["runs"][0]
    implied = [[f"{g:.3g}", f"{g * 1e9 / feb['train_img_per_s'][-1] / 1e3:.0f}"] for g in hal["avg_read_GBps"]
               if g is not None]
    return ("## I/O\n\n![IO](figures/IO.png)\n\nImages/s and MB/s of file bytes delivered by the loader; "
            "storage MB/s is `read_bytes` from /proc/self/io (0 when served from the page cache), read "
            "calls/s is `syscr`. Files/s = images/s: each ImageFolder sample opens one file. Cold points evict "
            "the dataset's pages first (`cache method`), and are marked verified when at least half the bytes "
            "came from storage.\n\n"
            + md_table(["backend", "cache", "workers", "readers", "images", "images/s", "MB/s", "files/s",
                        "storage MB/s", "read calls/s", "bytes/image", "first batch (s)", "cold verified",
                        "cache method", "host load (1 min)", "env", "record"], rows)
            + f"\nPublished (HAL 2020, storage side during {feb['gpus'][-1]}-GPU runs, {hal['note']}): average "
            f"read GB/s and the implied KB per image at the {feb['label']} run's {feb['gpus'][-1]}-GPU rate "
            f"({fmt(feb['train_img_per_s'][-1])} images/s):\n\n"
            + md_table(["avg read GB/s", "implied KB/image"], implied) + "\n")


# ---------------------------------------------------------------- allreduce

def _io_sweep(rs: Sequence[dict], key: str) -> List[dict]:
    """Points of the workers sweep (one reader), or of the readers sweep (at its per-reader workers,
    the 1-reader point with the same workers included as its start)."""
    if key == "workers":
        pts = [r for r in rs if r["point"]["readers"] == 1]
    else:
        multi = [r for r in rs if r["point"]["readers"] > 1]
        if not multi:
            return []
        w = multi[0]["point"]["workers"]
        pts = [r for r in rs if r["point"]["workers"] == w]
    return sorted(pts, key=lambda r: r["point"][key])


def allreduce_groups(ar: Sequence[dict]) -> Dict[Tuple[str, str, int], List[dict]]:
    groups: Dict[Tuple[str, str, int], List[dict]] = {}
    for r in ar:
        groups.setdefault((r["sweep"], r["point"]["backend"], r["metrics"]["world_size"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["metrics"]["bytes"]) for k, v in sorted(groups.items())}


def allreduce_section(ar: Sequence[dict], env: Environments, fig_dir: Path) -> str:
    groups = allreduce_groups(ar)
    series, rows, fits = [], [], []
    for i, ((sweep, backend, n), rs) in enumerate(groups.items()):
        label = f"{backend}, {n} processes" + (f" [{sweep}]" if len(groups) > 1 else "")
        xs = [r["metrics"]["bytes"] for r in rs]
        series.append({"label": f"busbw, {label}", "x": xs, "y": [r["metrics"]["busbw_gbps"] for r in rs],
                       "color": figures.palette(i)})
        series.append({"label": f"algbw, {label}", "x": xs, "y": [r["metrics"]["algbw_gbps"] for r in rs],
                       "color": figures.palette(i), "style": "x:"})
        rows += [[label, r["metrics"]["bytes"], figures.size_label(r["metrics"]["bytes"]), r["metrics"]["time_us"],
                  r["metrics"]["algbw_gbps"], r["metrics"]["busbw_gbps"], r["metrics"].get("iters"), env.id(r),
                  r["_source"]] for r in rs]
        fit = fit_alpha_beta([r["metrics"] for r in rs])
        if fit:
            fits.append([label, fit["alpha_s"] * 1e6, sm.hop_latency(fit["alpha_s"], n) * 1e6,
                         fit["busbw_bytes_per_s"] / 1e9])
    figures.allreduce(fig_dir / "allreduce.png", series, "All-reduce bandwidth (nccl-tests definitions)")
    return ("## All-reduce bandwidth\n\n![allreduce](figures/allreduce.png)\n\nalgbw = bytes / time; busbw = "
            "algbw x 2(n-1)/n (the traffic each link carries in a ring all-reduce), as nccl-tests reports.\n\n"
            + md_table(["series", "bytes", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "iterations", "env",
                        "record"], rows)
            + "\nFit used by the scaling model (latency = the smallest message's time; bandwidth = 1/slope of "
              "time vs bus bytes):\n\n"
            + md_table(["series", "small-message time (us)", "per-hop latency (us)", "fitted busbw (GB/s)"], fits))


def overlap_section(recs: Sequence[dict], env: Environments) -> str:
    """Exposed all-reduce per DDP step (results/overlap_bench.py), one row per record."""
    rows = []
    for r in sorted(recs, key=lambda r: (r["sweep"], r["point"]["world_size"], r["point"]["bucket_cap_mb"])):
        p, m = r["point"], r["metrics"]
        rows.append([p["arch"], p["image_size"], p["batch_size"], p["world_size"], p["bucket_cap_mb"],
                     figures.size_label(m["grad_bytes"]), m["step_time_ms"], m["step_no_allreduce_ms"],
                     m["exposed_comm_ms"], m["allreduce_alone_ms"], f"{100 * m['hidden_fraction']:.0f}%",
                     r.get("host_load_1m"), env.id(r), r["_source"]])
    if not rows:
        return "## DDP communication overlap\n\nNo overlap records yet: `python -m results.bench overlap`.\n"
    return ("## DDP communication overlap\n\nEach rank times the same DDP step with the gradient all-reduce "
            "(normal) and without it (`no_sync()`), interleaved; exposed = the difference of the medians "
            "(slowest rank), the communication backward did not hide. The all-reduce of the whole gradient "
            "timed alone is what there was to hide: hidden = 1 - exposed / alone. On a CPU the all-reduce "
            "threads compete with backward for the same cores, so little can hide here; on GPUs NCCL runs "
            "beside the compute kernels.\n\n"
            + md_table(["model", "image size", "batch/proc", "processes", "bucket (MB)", "gradient",
                        "step ms (all-reduce)", "step ms (no all-reduce)", "exposed ms", "all-reduce alone ms",
                        "hidden", "host load (1 min)", "env", "record"], rows))


# ---------------------------------------------------------------- scaling model

def model_overlap(overlap: Sequence[dict]) -> Tuple[float, Optional[dict]]:
    """The hidden fraction h the scaling model uses, and the overlap record it comes from.

    The newest sweep (by record time) wins; inside it, the record measured with DDP's default
    bucket size (the model's), else that sweep's newest record. h = 1 - exposed / alone from the
    record's metrics (what overlap_bench records as hidden_fraction). Without an overlap record:
    (``NO_OVERLAP``, None), the conservative assumption that all communication is exposed.
    """
    usable = [r for r in overlap if r["metrics"]["allreduce_alone_ms"] > 0]
    if not usable:
        return sm.NO_OVERLAP, None
    sweep = sorted(_newest_sweep(usable), key=lambda r: r["time"])
    default = [r for r in sweep if r["point"].get("bucket_cap_mb", 0) * (1 << 20) == sm.DDP_BUCKET_BYTES]
    rec = (default or sweep)[-1]
    return sm.hidden_fraction(rec["metrics"]["exposed_comm_ms"], rec["metrics"]["allreduce_alone_ms"]), rec


def overlap_text(h: float, rec: Optional[dict], env: Environments) -> str:
    """One paragraph: which overlap record (if any) fed the model's measured-overlap column."""
    if rec is None:
        return ("Measured overlap: no overlap records, so the model uses h = 0 (all communication exposed, the "
                "conservative assumption); `python -m results.bench overlap` measures it.")
    p, m = rec["point"], rec["metrics"]
    return (f"Measured overlap: h = {pct(h)}, the hidden fraction of overlap record {rec['_source']} ({p['arch']} "
            f"{p['image_size']}px, batch {p['batch_size']}, {p['world_size']} {p.get('backend', '?')} processes, "
            f"{p['bucket_cap_mb']:g} MB buckets, env {env.id(rec)}): {fmt(m['exposed_comm_ms'])} ms of the "
            f"{fmt(m['allreduce_alone_ms'])} ms gradient all-reduce stayed exposed per step (exposed / alone = "
            f"{fmt(m['exposed_comm_ms'] / m['allreduce_alone_ms'])}). The same h is applied to every scenario and "
            "GPU count; it was measured on that record's machine and backend, so for the GPU clusters it is an "
            "assumption, not a measurement. An exposed / alone ratio above 1 means the all-reduce also slowed the "
            "compute, which the model does not represent.")


def our_model(train: Sequence[dict], ar: Sequence[dict]) -> Tuple[Optional[sm.ModelInputs], List[dict], str]:
    """Model inputs from our records: 1-process compute step, the model's gradients, measured link."""
    train = [r for r in train if plain_local(r)]
    synthetic = [r for r in train if r["point"].get("data") == "dummy"] or list(train)
    singles = [r for r in synthetic if r["metrics"]["world_size"] == 1]
    groups = allreduce_groups(ar)
    if not singles or not groups:
        return None, [], "needs a 1-process train record and allreduce records"
    base = singles[-1]
    (_, _, n_ar), ar_rows = list(groups.items())[-1]
    fit = fit_alpha_beta([r["metrics"] for r in ar_rows])
    params = base["metrics"].get("parameters") or parameter_count(base["point"]["arch"])
    if not fit or not params:
        return None, [], "allreduce fit or parameter count unavailable"
    per_param = 2 if base["point"].get("precision") in ("O2", "O3") else 4
    m = sm.ModelInputs(step_time_s=base["metrics"]["step_time_ms"] / 1e3, batch_per_gpu=base["point"]["batch_size"],
                       grad_bytes=params * per_param, busbw_intra=fit["busbw_bytes_per_s"],
                       alpha_intra_s=sm.hop_latency(fit["alpha_s"], n_ar))
    same = [r for r in synthetic if r["sweep"] == base["sweep"] and r["metrics"]["world_size"] > 1
            and all(r["point"].get(k) == base["point"].get(k) for k in GROUP_KEYS)]
    desc = (f"{base['point']['arch']} ({params} parameters x {per_param} bytes), 1-process step from record "
            f"{base['_source']}, link from the {n_ar}-process all-reduce fit")
    return m, same, desc


def hal_model(pub: dict, links: dict, hidden_fraction: float) -> Tuple[sm.ModelInputs, dict]:
    L = links["hal_2020"]
    run = next(r for r in pub["hal_2020"]["runs"] if r["label"] == L["run"])
    params = parameter_count(L["arch"])
    m = sm.ModelInputs(step_time_s=1.0, batch_per_gpu=run["batch_per_gpu"], grad_bytes=params * L["grad_bytes_per_param"],
                       busbw_intra=L["busbw_intra"], alpha_intra_s=L["alpha_intra_s"], gpus_per_node=L["gpus_per_node"],
                       busbw_inter=L["busbw_inter"], alpha_inter_s=L["alpha_inter_s"])
    n0, x0 = run["gpus"][0], run["train_img_per_s"][0]
    return sm.calibrate(m, n0, n0 * run["batch_per_gpu"] / x0, hidden_fraction), run


def dle_model(pub: dict, links: dict) -> Tuple[sm.ModelInputs, dict]:
    L = links["nvidia_dle_2021"]
    pts = pub["nvidia_dle_2021"]["train_img_per_s"][L["config"]]
    params = parameter_count(L["arch"])
    m = sm.ModelInputs(step_time_s=L["batch_per_gpu"] / pts["1"], batch_per_gpu=L["batch_per_gpu"],
                       grad_bytes=params * L["grad_bytes_per_param"], busbw_intra=L["busbw_intra"],
                       alpha_intra_s=L["alpha_intra_s"], gpus_per_node=L["gpus_per_node"])
    return m, pts


MODES = (("no overlap", "--"), ("measured overlap", "-."), ("full overlap", "-"))  # label, line style


def model_section(train: Sequence[dict], ar: Sequence[dict], overlap: Sequence[dict], pub: dict, links: dict,
                  env: Environments, fig_dir: Path) -> str:
    gpus = sm.powers_of_two(1, 1024)
    h, h_rec = model_overlap(overlap)
    hidden = (sm.NO_OVERLAP, h, sm.FULL_OVERLAP)  # one per MODES entry
    ours, ours_measured, ours_desc = our_model(train, ar)
    fits = [hal_model(pub, links, x) for x in hidden]  # t_c calibrated under each assumption
    hal, run = [inputs for inputs, _ in fits], fits[0][1]
    scenarios = []  # (label, inputs per MODES entry)
    if ours:
        scenarios.append(("this machine (gloo, measured)", [ours] * len(MODES)))
    scenarios.append(("HAL V100 cluster (link specs)", hal))
    thr, eff = [], []
    for i, (label, ms) in enumerate(scenarios):
        c = figures.palette(i)
        for m, x, (tag, style) in zip(ms, hidden, MODES):
            pts = [sm.predict(m, n, x) for n in gpus]
            thr.append({"label": f"{label}, {tag}", "x": gpus, "y": [p["images_per_s"] for p in pts], "style": style,
                        "color": c})
            eff.append({"label": f"{label}, {tag}", "x": gpus, "y": [p["efficiency"] for p in pts], "style": style,
                        "color": c})
    thr.append({"label": f"HAL 2020 published ({run['label']})", "x": run["gpus"], "y": run["train_img_per_s"],
                "style": "*", "color": "black"})
    if ours_measured:
        thr.append({"label": "this machine measured", "x": [r["metrics"]["world_size"] for r in ours_measured],
                    "y": [r["metrics"]["images_per_s"] for r in ours_measured], "style": "D", "color": figures.palette(0)})
    figures.grid(fig_dir / "scaling_model.png", [
        {"title": "predicted throughput", "xlabel": "GPUs (processes)", "ylabel": "images/s", "series": thr,
         "xlog": True, "ylog": True, "legend_loc": "lower right"},  # the upper left hides published points
        {"title": "predicted scaling efficiency", "xlabel": "GPUs (processes)", "ylabel": "efficiency (fraction of linear)",
         "series": eff, "xlog": True, "ymin0": True},
    ], f"Scaling model: compute + ring all-reduce; no, measured (h = {pct(h)}) and full overlap")
    return _model_text(scenarios, hidden, gpus, ours_desc, ours, ours_measured, pub, links, run,
                       overlap_text(h, h_rec, env))


def _model_text(scenarios, hidden, gpus, ours_desc, ours, ours_measured, pub, links, run, h_text) -> str:
    modes = [tag for tag, _ in MODES]
    inputs = [[label, *(m.step_time_s * 1e3 for m in ms), ms[0].batch_per_gpu, ms[0].grad_bytes / 1e6,
               ms[0].busbw_intra / 1e9, ms[0].alpha_intra_s * 1e6, ms[0].gpus_per_node if ms[0].busbw_inter else "all",
               None if ms[0].busbw_inter is None else ms[0].busbw_inter / 1e9,
               None if ms[0].alpha_inter_s is None else ms[0].alpha_inter_s * 1e6]
              for label, ms in scenarios]
    pred = []
    for label, ms in scenarios:
        for n in gpus:
            ps = [sm.predict(m, n, x) for m, x in zip(ms, hidden)]
            pred.append([label, n, ps[0]["comm_time_s"] * 1e3, ps[1]["exposed_comm_s"] * 1e3,
                         *(c for p in ps for c in (p["images_per_s"], pct(p["efficiency"])))])

    def check_row(name, ms, n, x):
        ys = [sm.predict(m, n, h)["images_per_s"] for m, h in zip(ms, hidden)]
        return [name, n, x, *(c for y in ys for c in (y, pct(sm.relative_error(y, x))))]

    hal = next(ms for label, ms in scenarios if label.startswith("HAL"))
    check = [check_row(f"HAL 2020 ({run['label']})", hal, n, x) for n, x in zip(run["gpus"], run["train_img_per_s"])]
    dle, dle_pts = dle_model(pub, links)
    check += [check_row(f"NVIDIA DLE {links['nvidia_dle_2021']['config']}", [dle] * len(MODES), n, dle_pts[str(n)])
              for n in sorted(int(k) for k in dle_pts)]
    check += [check_row(f"this machine ({r['_source']})", [ours] * len(MODES), r["metrics"]["world_size"],
                        r["metrics"]["images_per_s"]) for r in ours_measured]
    hal_rows = [c for c in check if c[0].startswith("HAL")]
    worst = [max(abs(sm.relative_error(c[3 + 2 * i], c[2])) for c in hal_rows) for i in range(len(MODES))]
    sources = "\n".join(f"- {k}: {v}" for sec in ("hal_2020", "nvidia_dle_2021") for k, v in links[sec].items()
                        if k.endswith("_source"))
    return ("## Scaling model\n\n![scaling model](figures/scaling_model.png)\n\n"
            "t(n) = t_c + max(0, t_comm(n) - hidden(n)), hidden(n) = min(h t_comm(n), f t_c): h is the hidden "
            "fraction of the all-reduce, capped by the backward time (f = "
            f"{sm.BACKWARD_FRACTION:.3g}, the backward share). h = 0 is no overlap (t_c + t_comm(n)), h = 1 full "
            "overlap ((1-f) t_c + max(f t_c, t_comm(n))), and the measured overlap uses h from an overlap record; "
            f"t_comm(n) = k 2(n-1) alpha + 2(n-1)/n G / B with k = ceil(G / {sm.DDP_BUCKET_BYTES / (1 << 20):g} MiB) "
            "DDP buckets; B and alpha are intra-node while n fits one node, inter-node beyond (see "
            "`results/scaling_model.py`).\n\n" + h_text + "\n\n"
            f"This machine: {ours_desc}; beyond 2 processes it assumes a cluster of such nodes joined by the "
            "measured link, and it ignores that our processes share 2 cores.\n\n"
            "HAL: t_c is calibrated, under each overlap assumption, so that the model reproduces the smallest "
            "published point, then predicts the others.\n\nInputs:\n\n"
            + md_table(["scenario", *(f"t_c {t} (ms)" for t in modes), "batch/GPU", "gradient MB",
                        "intra busbw (GB/s)", "intra hop latency (us)", "GPUs/node", "inter busbw (GB/s)",
                        "inter hop latency (us)"], inputs)
            + "\nWhere the link parameters come from (`results/reference/links.json`):\n\n" + sources + "\n\n"
            "Predictions (comm = the whole all-reduce; exposed = what the measured overlap leaves of it):\n\n"
            + md_table(["scenario", "GPUs", "comm ms/step", "exposed ms/step (measured overlap)",
                        *(c for t in modes for c in (f"images/s ({t})", f"efficiency ({t})"))], pred)
            + "\nCheck against published multi-GPU tables and our own multi-process points (error = (predicted "
            "- measured) / measured):\n\n"
            + md_table(["measured", "GPUs", "measured images/s", *(c for t in modes for c in (f"predicted ({t})",
                                                                                              "error"))], check)
            + (f"\nLargest HAL error: {', '.join(f'{pct(w)} with {t}' for w, t in zip(worst, modes))}. The model has "
               "no input pipeline, stragglers or per-step overheads, so it is optimistic where those grow with the GPU "
               "count (the DLE 8-GPU point), and on this machine it cannot see that two processes split two cores.\n"
               if hal_rows else ""))


# ---------------------------------------------------------------- failures, problems, assembly

def problems_section(recs: Sequence[dict], problems: Sequence[records.Problem], env: Environments) -> str:
    failed = [[r["kind"], json.dumps(r["point"], sort_keys=True), r["error"], env.id(r), r["_source"]]
              for r in recs if r["status"] != "ok"]
    bad = [[p.source, p.line, p.reason] for p in problems]
    out = "## Failed points and unusable records\n\n"
    out += "Failed points (recorded by the harness):\n\n" + md_table(["kind", "point", "why", "env", "record"], failed)
    out += "\nRecords the report could not use:\n\n" + md_table(["file", "line", "problem"], bad)
    return out


def commands_section(recs: Sequence[dict]) -> str:
    rows = [[r["_source"], r.get("command") or r["environment"].get("command")] for r in recs]
    return ("## Commands\n\n<details><summary>command line of each record</summary>\n\n"
            + md_table(["record", "command"], [[a, f"`{b}`"] for a, b in rows]) + "\n</details>\n")


def build(record_paths: Sequence[Path], out_dir: Path, ref_dir: Path = REFERENCE) -> Tuple[Path, List]:
    """Write figures and RESULTS.md; returns (RESULTS.md path, problems)."""
    recs, problems = records.load(record_paths)
    if not recs and not problems:
        raise ReportError(f"no records in {', '.join(map(str, record_paths))}; run `python -m results.bench quick` "
                          "(or `make bench`) first")
    pub, links = load_reference(ref_dir)
    fig_dir = out_dir / "figures"
    train, io, ar = by_kind(recs, "train"), by_kind(recs, "io"), by_kind(recs, "allreduce")
    overlap, steady = by_kind(recs, "overlap"), by_kind(recs, "pipeline")
    add_efficiency(train)
    env = Environments()
    problems = list(problems)
    body = [summary_section(train, io, overlap, steady), pipeline_section(io, steady, env, fig_dir),
            step_section(train, env, fig_dir),
            step_section(train, env, fig_dir, gpu=True),
            multinode_section(train, env), throughput_section(train, pub, env, fig_dir),
            time_section(train, pub, env, fig_dir),
            curves_section(train, env, fig_dir, problems), io_section(io, pub, env, fig_dir),
            allreduce_section(ar, env, fig_dir), overlap_section(overlap, env),
            model_section(train, ar, overlap, pub, links, env, fig_dir), report_data_scale.section(recs, md_table)]
    tail = [problems_section(recs, problems, env), "## Environments\n\n" + env.table(), commands_section(recs)]
    head = ("# Results\n\nGenerated by `python -m results.report` from "
            f"{len(recs)} records ({sum(r['status'] == 'ok' for r in recs)} ok, "
            f"{sum(r['status'] != 'ok' for r in recs)} failed, {len(problems)} unusable) in "
            + ", ".join(f"`{_rel(p)}`" for p in record_paths)
            + ". Do not edit: rerun the command. Published numbers come from `results/reference/` with their "
              "sources.\n")
    path = out_dir / "RESULTS.md"
    path.write_text("\n".join([head, *body, *tail]))
    log.info("wrote %s (%d records, %d problems)", path, len(recs), len(problems))
    return path, problems


def _rel(p: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m results.report", description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="+", type=Path, default=[records.RECORDS_DIR],
                    help="record files or folders of *.jsonl (default results/records)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where RESULTS.md and figures/ go (default results)")
    ap.add_argument("--reference", type=Path, default=REFERENCE, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    missing = [p for p in a.records if not Path(p).exists()]
    try:
        if missing:
            raise ReportError(f"{missing[0]} does not exist; pass record files or a folder of *.jsonl")
        _, problems = build(a.records, a.out, a.reference)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"warning: {len(problems)} record(s) could not be used; listed in RESULTS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
