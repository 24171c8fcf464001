"""``python -m studies.published_model --check-time-to-accuracy``: predicted time to train vs published times.

Each published time-to-train point of ``studies/published_model/reference/epochs_to_accuracy.json`` (MLPerf's logs,
FFCV's 8-A100 table, DeepLearningExamples' 90-epoch times) is printed with every term of its prediction: the
throughput model it runs on, images/s, epochs, evaluations, training and evaluation seconds, the
published time and the error. None of these times was used to fit anything: the throughput models
are the ``--check`` cases, calibrated on one-GPU images/s. A point whose hardware has no throughput
input says which measurement would give it one. Exit 1 when a predicted point misses by more than the
tolerance (and the published rounding). The arithmetic is ``studies.published_model.time_to_train``; this
module holds the table's cells and the summary in words, ``studies/published_model/__main__.py`` the command.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from studies.published_model import formulas as scaling_model, words
from studies.published_model import time_to_train as time_to_accuracy

HEADERS = ("published", "hardware", "GPUs", "global batch", "epochs", "evals", "throughput from", "train px factor",
           "predicted images/s", "binding", "train s", "eval s", "predicted s", "published s", "error", "within",
           "at published images/s s")


def _s(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0f}"


def table_rows(rows: Sequence[Dict[str, object]]) -> List[List[str]]:
    return [[r["name"], r["hardware"], str(r["gpus"]), str(r["global_batch"]), f"{r['epochs']:g}", str(r["evals"]),
             r["throughput_source"], f"{r['train_factor']:.3f}", _s(r.get("images_per_s")), r.get("binding", "-"),
             _s(r.get("train_s")), _s(r.get("eval_s")), _s(r.get("total_s")), _s(r["published_s"]),
             f"{100 * r['error']:+.1f}%" if "error" in r else "-",
             ("yes" if r["within"] else "no") if "within" in r else "-", _s(r.get("at_published_rate_s"))]
            for r in rows]


def summary(rows: Sequence[Dict[str, object]], tolerance: float = scaling_model.CHECK_TOLERANCE) -> str:
    predicted = [r for r in rows if "error" in r]
    bad = time_to_accuracy.failures(rows)
    return "\n".join([words("tta_check.summary", ok=len(predicted) - len(bad), predicted=len(predicted),
                            tolerance=100 * tolerance, unpredicted=len(rows) - len(predicted), rows=len(rows)),
                      *(words("tta_check.miss", r=r, error=100 * r["error"], total=_s(r["total_s"]),
                              published=_s(r["published_s"])) for r in bad),
                      *(words("tta_check.not_predicted", r=r) for r in rows if "error" not in r)])
