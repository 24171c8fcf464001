"""The scaling model's prediction for each cluster (tag) of the harness's records, from that tag's records alone:
measured against predicted images/s per GPU count, the binding term, where the model misses and which input it
lacked (:mod:`studies.published_model.cluster_model` does the arithmetic)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.records import by_kind
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import fmt, gpu_axis, md_table, pct
from hpc_imagenet.harness.report.training import main_series, train_series
from studies.published_model import cluster_model, predicted_tta, words
from studies.published_model.cluster_model import predict_cluster


def section(tags: Dict[str, Sequence[Record]], fig_dir: Path) -> str:
    """One subsection per tag (its records file's counted records) whose training points the model can predict."""
    parts: List[str] = []
    for tag, recs in tags.items():
        text, _ = model_section(tag, train_series(by_kind(recs, "train")), by_kind(recs, "allreduce"),
                                by_kind(recs, "overlap"), by_kind(recs, "storage"), fig_dir)
        parts += [text] if text else []
    return "\n".join([words("cluster_section.heading"), *parts]) if parts else ""


MODEL_COLUMNS = ("GPUs", "measured images/s", "predicted images/s", "error", "predicted efficiency",
                 "exposed all-reduce (ms/step)", "straggler wait (ms/step)", "binding")


def model_section(tag: str, series, ar, overlap, storage, fig_dir: Path) -> Tuple[str, Optional[str]]:
    """(markdown, the binding term at the largest measured scale or None)."""
    main = main_series(series)
    if not series:  # no training measured under this tag: nothing for the model to say
        return "", None
    if not main:
        return words("cluster_section.single", tag=tag) + "\n", None
    (hw, name), pts = main
    recs = [r for p in pts for r in p.records]
    pred, why = predict_cluster(recs, ar, overlap, storage)
    if not pred:
        return f"### {tag}\n\nNo prediction for {name}: {why}.\n", None
    xs = [row["gpus"] for row in pred.rows]
    figure = f"scaling_model-{tag}.png"
    figures.report_panels(fig_dir / figure, [{
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
    text = words("cluster_section.model", tag=tag, figure=figure, name=name, gpus=largest["gpus"],
                 binding=largest["binding"],
                 table=md_table(MODEL_COLUMNS, rows), misses=_misses(pred), src=src,
                 t_c=fmt(1e3 * w.inputs.step_time_s), grad=fmt(w.inputs.grad_bytes),
                 busbw="-" if w.inputs.busbw_intra == float("inf") else f"{fmt(w.inputs.busbw_intra / 1e9)} GB/s",
                 link=src.get("all-reduce link", "not measured"), h=pct(w.hidden_fraction),
                 hidden=src.get("hidden fraction", "none: h = 0"), storage="-" if not w.storage else
                 f"{fmt(w.storage.read_bytes_per_s / 1e6)} MB/s, {fmt(w.storage.opens_per_s)} files/s",
                 storage_from=src.get("storage", "not on this series' path"),
                 missing="".join(f"- {m}\n" for m in pred.missing),
                 tta=predicted_tta.predicted_section(pred, hw, fig_dir, figure=f"time_to_accuracy-{tag}.png"))
    return text, largest["binding"] + (
        " (all-reduce not measured)" if any(m.startswith("all-reduce") for m in pred.missing) else "")


def _misses(pred) -> str:
    """Where the model misses a measured point by more than the tolerance, and which term misses."""
    found = cluster_model.misses(pred)
    if not found:
        return f"The model agrees with every measured point within {cluster_model.TOLERANCE:.0%}.\n"
    lines = [f"- {m.gpus} {'GPU' if m.gpus == 1 else 'GPUs'}: {pct(m.error)}: a step of {fmt(m.predicted_ms)} ms "
             f"predicted, {fmt(m.measured_ms)} ms measured; {m.term}." for m in found]
    return words("cluster_section.misses", tolerance=cluster_model.TOLERANCE, lines="\n".join(lines)) + "\n"


