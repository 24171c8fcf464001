"""Report section: the whole-step scaling model against every published point (figure, inputs, check table).

The model's inputs and the check are ``studies.published_model.whole_step``; this module puts them in words and
tables, for the study's write-up and for ``python -m studies.published_model --check``.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.config import WARMUP_STEPS
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import md_table
from studies.published_model import formulas as scaling_model, words
from studies.published_model import whole_step


def _ms(value: float) -> str:
    return f"{1e3 * value:.1f}"


def _storage_s(row: dict, term: str) -> Optional[str]:
    v = row["storage_epoch_s"].get(term)
    return None if v is None else f"{v:.1f}"


def table_rows(rows: Sequence[dict]) -> List[List[object]]:
    return [[r["case"], r["gpus"], r["batch"], f"{r['measured']:.0f}", f"{r['predicted']:.0f}",
             f"{100 * r['error']:+.1f}%" + (" (calibration)" if r["calibration"] else ""),
             f"{100 * r['error_low']:+.1f}..{100 * r['error_high']:+.1f}%", r["binding"],
             _ms(r["compute_s"]), _ms(r["exposed_comm_s"]), _ms(r["straggler_s"]), _ms(r["data_wait_s"]),
             _ms(r["restart_per_step_s"]), _ms(r["storage_wait_s"]),
             None if r["pipeline_images_per_s"] is None else f"{r['pipeline_images_per_s']:.0f}",
             f"{r['timed_steps']}/{r['steps']}", f"{r['epoch_s']:.1f}", _storage_s(r, "storage bandwidth"),
             _storage_s(r, "storage opens"), _ms(r["residual_s"])] for r in rows]


HEADERS = ("published", "GPUs", "batch/GPU", "measured images/s", "predicted images/s", "error", "error band",
           "binding term", "compute ms", "exposed all-reduce ms", "straggler wait ms", "data wait ms",
           "loader restart ms/step", "storage wait ms", "pipeline ceiling images/s", "timed/all steps", "epoch s",
           "storage read s/epoch", "storage opens s/epoch", "unexplained ms/step")


INPUT_UNITS = {"loader_restart_s": ("s per epoch", ".1f"), "images_per_core_s": ("images/s per loader core", ".0f")}


def _needs(row: dict) -> str:
    unit, fmt = INPUT_UNITS.get(row["unmeasured_input"], ("", ".3g"))
    have = row["cited_value"]
    if row.get("needed_value") is None:
        return ("no pipeline record gives the model a loader rate (`python -m hpc_imagenet.harness.bench pipeline`)"
                if have is None and row["unmeasured_input"] == "images_per_core_s"
                else f"no value of {row['unmeasured_input']} reaches it")
    return (f"it needs {format(row['needed_value'], fmt)} {unit}"
            + (f" where the model has {format(have, fmt)}" if have is not None else ""))


def summary(rows: Sequence[dict], tolerance: float = scaling_model.CHECK_TOLERANCE) -> str:
    """How many points are within the tolerance, and for each miss the measurement it lacks, bracketed."""
    bad = whole_step.failures(rows, tolerance)
    head = words("whole_step.within", ok=len(rows) - len(bad), rows=len(rows), tolerance=100 * tolerance,
                 calibration=sum(r["calibration"] for r in rows))
    if not bad:
        return head + " " + words("whole_step.all_within", tolerance=100 * tolerance)
    return "\n".join([head, words("whole_step.others"), *(words("whole_step.miss", r=r, error=100 * r["error"],
                                                                low=100 * r["error_low"], high=100 * r["error_high"],
                                                                residual=_ms(r["residual_s"]), needs=_needs(r))
                                                          for r in bad)])


def dle_bracket(rows: Sequence[dict]) -> str:
    """The other side of DLE's bracket: its own 1-GPU point, where the loaders of one GPU's workers kept up."""
    missed = {r["case"] for r in whole_step.failures(rows) if r["case"].startswith("NVIDIA DLE")}
    parts = [f"{r['case']} {r['measured'] / (r['pipeline_images_per_s'] / r['cited_value']):.0f}" for r in rows
             if r["case"] in missed and r["gpus"] == 1 and r["pipeline_images_per_s"] and r["cited_value"]]
    return " " + words("whole_step.dle_bracket", parts=", ".join(parts)) if parts else ""


def inputs_text(got: whole_step.Measured, links: dict) -> str:
    rates = (", ".join(f"{b} {r:.0f} images/s per core ({src})" for b, r, src in got.rates)
             or "none (no pipeline records)")
    steps = ", ".join(f"{d}: {len(s)} steps ({src}), straggler factor E[max of 64]/mean = "
                      f"{scaling_model.straggler_factor(s, 64):.3f}" for d, s, src in got.step_samples) or "none"
    return words("whole_step.inputs", rates=rates, steps=steps, h=100 * got.hidden_fraction,
                 no_gpu="" if got.samples("cuda")[1] else " " + words("whole_step.no_gpu_steps"),
                 source=f" from {got.overlap_source}" if got.overlap_source else " (no overlap record)")


def storage_text(storage: Sequence[Record], links: dict) -> str:
    per_image = links["hal_2020"]["bytes_per_image"]
    got = whole_step.storage_ceiling(storage, per_image)
    if got is None:
        return words("whole_step.no_storage")
    mbps, files, images, src = got
    return words("whole_step.storage", src=src, mbps=mbps, files=files, images=images, kb=per_image / 1e3)


def own_runs_text(train: Sequence[Record], restart_s: float, hal_run_s: Optional[Tuple[int, float]] = None) -> str:
    """How this project's timing differs from a loader that restarts every epoch, with the newest record
    that shows what a start costs here (a GPU run on real images with loader workers)."""
    text = words("whole_step.own_runs", warmup=WARMUP_STEPS) + " "
    if hal_run_s:
        n, t = hal_run_s
        text += words("whole_step.hal_restart", restart=restart_s, total=90 * restart_s, n=n, t=t) + " "
    firsts = [r for r in train if r.metrics.epochs_run == 1 and r.metrics.epoch_time_s
              and r.point.data not in (None, "dummy") and (r.point.workers or 0) > 0
              and str(r.metrics.device or "").startswith("cuda")]
    if firsts:
        r = max(firsts, key=lambda r: r.time)
        m = r.metrics
        steps = m.measured_steps + m.warmup_steps
        start = m.epoch_time_s - steps * m.step_time_ms / 1e3
        text += words("whole_step.start_cost", r=r, m=m, steps=steps, start=start)
    return text


def _hal_time_to_train(pub: dict) -> Optional[Tuple[int, float]]:
    runs = [r for r in pub["hal_2020"]["runs"] if r.get("train_time_s")]
    return max(zip(runs[0]["gpus"], runs[0]["train_time_s"])) if runs else None


def section(train: Sequence[Record], pipeline: Sequence[Record], overlap: Sequence[Record], pub: dict, links: dict,
            fig_dir: Path, storage: Sequence[Record] = ()) -> str:
    """Markdown for the write-up (after the compute + all-reduce model) and figures/scaling_model_terms.png."""
    got = whole_step.measured(train, pipeline, overlap)
    cs = whole_step.cases(pub, links, got)
    rows = whole_step.check_rows(cs)
    _figure(cs, rows, fig_dir / "scaling_model_terms.png")
    sources = "\n".join(f"- {sec} {k}: {v}" for sec in ("hal_2020", "nvidia_dle_2021") for k, v in links[sec].items()
                        if k.endswith("_source") and any(w in k for w in ("loader", "storage", "bytes", "runs",
                                                                           "check_configs", "systems", "epoch",
                                                                           "hidden", "cores")))
    restart = sum(whole_step.restart_range(links["hal_2020"])) / 2
    return words("whole_step.section", max_gpus=scaling_model.CALIBRATION_MAX_GPUS,
                 tolerance=100 * scaling_model.CHECK_TOLERANCE, inputs=inputs_text(got, links),
                 storage=storage_text(storage, links), own_runs=own_runs_text(train, restart, _hal_time_to_train(pub)),
                 sources=sources, table=md_table(HEADERS, table_rows(rows)),
                 summary=summary(rows) + dle_bracket(rows)) + "\n"


def _figure(cs: Sequence[whole_step.Case], rows: Sequence[dict], path: Path) -> None:
    """Per-GPU images/s, model lines against published points; and each point's error with the tolerance band."""
    gpus = [2 ** i for i in range(8)]  # 1 to 128
    per_gpu, errors = [], []
    for i, case in enumerate(cs):
        c = figures.palette(i)
        # the table's last batch (may: 224 at 4 GPUs, then 256)
        w = scaling_model.with_batch(case.model, case.points[-1][1])
        per_gpu.append({"label": "_nolegend_", "x": gpus, "style": "-", "color": c,
                        "y": [scaling_model.breakdown(w, n)["images_per_s"] / n for n in gpus]})
        per_gpu.append({"label": "_nolegend_", "x": [n for n, _, _ in case.points], "style": "o",
                        "color": c, "y": [x / n for n, _, x in case.points]})
        mine = [r for r in rows if r["case"] == case.name]
        errors.append({"label": case.name, "x": [r["gpus"] for r in mine], "y": [100 * r["error"] for r in mine],
                       "style": "o-", "color": c})
        errors += [{"label": "_nolegend_", "x": [r["gpus"]] * 2, "y": [100 * r["error_low"], 100 * r["error_high"]],
                    "style": "_-", "color": c} for r in mine if r["error_high"] > r["error_low"]]  # the cited band
    per_gpu += [{"label": "model (colours as on the right)", "x": [], "y": [], "style": "-", "color": "black"},
                {"label": "published", "x": [], "y": [], "style": "o", "color": "black"}]
    tol = 100 * scaling_model.CHECK_TOLERANCE
    errors += [{"label": label, "x": [1, 128], "y": [y, y], "style": ":", "color": "black"}
               for label, y in ((f"+-{tol:.0f}% (--check)", tol), ("_nolegend_", -tol))]
    figures.grid(path, [
        {"title": "images/s per GPU: model (lines) and published (points)", "xlabel": "GPUs",
         "ylabel": "images/s per GPU", "series": per_gpu, "xlog": True, "ylog": True, "legend_loc": "lower center"},
        {"title": "(predicted - published) / published; bars: cited ranges",
         "xlabel": "GPUs", "ylabel": "error (%)",
         "series": errors, "xlog": True, "legend_loc": "upper left"},
    ], "Whole-step model: compute + all-reduce + stragglers + input pipeline + loader restart + storage")
