"""Learning curves from the runs' TensorBoard events (the engine's rank 0 writes them), for the report's
curves section."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

from hpc_imagenet.harness.core import records
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.common import REPO, data_label, plain_local

CURVES = {"top1_train": ("Top1/train", "train top-1 (%)"), "top1_val": ("Top1/val", "validation top-1 (%)"),
          "top5_train": ("Top5/train", "train top-5 (%)"), "top5_val": ("Top5/val", "validation top-5 (%)")}


def read_scalars(run_dir: Path, tags: Sequence[str]) -> Dict[str, List[Tuple[int, float]]]:
    """(step, value) of each of TAGS a run logged, read from its TensorBoard events with TensorBoard's
    own reader, in step order; tags it did not log (or no events at all) are left out."""
    if not any(run_dir.glob("events.out.tfevents*")):
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # "No path found after ..." chatter
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    logged = set(acc.Tags().get("scalars", []))
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in tags if tag in logged}


def run_folder(record: Record) -> Path:
    """RECORD's run folder: relative to the checkout (the harness's records), else beside the records file's
    folder (a report made outside a checkout, as the pipeline's: OUT/report/records and OUT/report/run)."""
    in_checkout = REPO / record.run_dir
    if in_checkout.is_dir() or not record.folder:
        return in_checkout
    return Path(record.folder).parent / record.run_dir


def kept_events(record: Record) -> bool:
    """Whether RECORD's run folder is here with TensorBoard events in it."""
    return any(run_folder(record).glob("events.out.tfevents*"))


def read_curves(run_dir: Path) -> Dict[str, List[Tuple[int, float]]]:
    """The epoch scalars (top-1 and top-5, train and validation) of a run's TensorBoard events."""
    return read_scalars(run_dir, [tag for tag, _ in CURVES.values()])


def curve_runs(train: Sequence[Record], problems: List[records.Problem]) -> List[Tuple[str, dict, dict]]:
    """(label, record, curves) for runs with kept events; real-data runs when any exist. A run that was a SLURM
    job counts where its folder came back with its events (the pipeline's report keeps the run's folder)."""
    with_dir = [r for r in train if r.run_dir and (plain_local(r) or (not r.point.setup and kept_events(r)))]
    real = [r for r in with_dir if r.point.data != "dummy"]
    out = []
    for r in (real or with_dir):
        d = run_folder(r)
        c = read_curves(d) if d.is_dir() else {}
        if not c:
            problems.append(records.Problem(r.source, 0, f"learning curves: no TensorBoard events in {d}"))
            continue
        label = f"{r.metrics.world_size} process(es), {data_label(r.point.data)}"
        out.append((label, r, c))
    return sorted(out, key=lambda t: (t[1].point.data != "dummy", t[1].metrics.world_size))


def curve_series(runs: Sequence[Tuple[str, Record, dict]], tag: str, suffix: str = "",
                 **style: object) -> List[figures.Series]:
    """TAG's curve of each run (of curve_runs) that logged it, a colour per run, labelled with SUFFIX."""
    return [{"label": label + suffix, "x": [s for s, _ in c[tag]], "y": [v for _, v in c[tag]],
             "color": figures.palette(i), **style} for i, (label, _, c) in enumerate(runs) if c.get(tag)]


def epoch_rows(runs: Sequence[Tuple[str, Record, dict]], tail: Callable[[Record], list]) -> List[list]:
    """One table row per run (of curve_runs) and epoch: its label, the epoch, the CURVES values, TAIL(record)."""
    rows = []
    for label, r, c in runs:
        val = {tag: dict(c.get(tag, [])) for tag, _ in CURVES.values()}
        for e in sorted({s for v in val.values() for s in v}):
            rows.append([label, e, *(val[tag].get(e) for tag, _ in CURVES.values()), *tail(r)])
    return rows
