"""Report section: the headline ratios, each from the newest sweep that has it."""
from __future__ import annotations

from typing import Sequence

from results.analysis import comparisons
from results.analysis.comparisons import times
from results.core.kinds import Record
from results.core.records import newest_sweep
from results.report.common import data_label, fmt, pct, prose
from results.core.setups import CKPT_REPORT_MINUTES


def _load(record: Record) -> str:
    """The load the machine had when RECORD was measured, and where the record is."""
    return f"host load {fmt(record.host_load_1m)} (`{record.source}`)"


def _step(row: dict) -> dict:
    """What the training-step bullets say of a comparison ROW's record (the values of their text)."""
    r = row["record"]
    return {"p": r.point, "m": r.metrics, "data": data_label(r.point.data), "ms": fmt(r.metrics.step_time_ms),
            "load": _load(r)}


def summary_section(train: Sequence[Record], io: Sequence[Record], overlap: Sequence[Record] = (),
                    steady: Sequence[Record] = ()) -> str:
    """The headline ratios, each from the newest sweep that has it, with the load at the time."""
    lines = []
    ratios = [r for r in steady if r.metrics.ratio_per_core and r.point.backend != "baseline"]
    for r in newest_sweep(ratios):
        m = r.metrics
        augmented = r.point.auto_augment and r.point.split == "train"  # validation has no policy
        policy = f", {r.point.auto_augment} after the crop" if augmented else ""
        lines.append(prose("summary.steady", p=r.point, m=m, ratio=times(m.ratio_per_core), low=times(m.ratio_min),
                           high=times(m.ratio_max), load=_load(r), policy=policy))
    # the engine's default backend; the other backends are in the section's table and figure
    pipe = [x for x in comparisons.pipeline_rows(io)
            if x["per_core_ratio"] and x["record"].point.backend == "fast"]
    for x in newest_sweep(pipe, lambda x: x["record"]):
        lines.append(prose("summary.pipeline", p=x["record"].point, ratio=times(x["per_core_ratio"]),
                           ours=fmt(x["record"].metrics.images_per_cpu_s),
                           base=fmt(x["baseline"].metrics.images_per_cpu_s), wall=times(x["wall_ratio"]),
                           load=_load(x["record"])))
    steps = [x for x in comparisons.step_rows(train)
             if x["step_speedup"] and x["record"].point.setup != "baseline"]

    def kind(record: Record) -> tuple:  # the newest sweep of each device and kind of data: a GPU sweep hides no CPU one
        return record["record"].on_gpu, record["record"].point.data == "dummy"
    newest = {k: newest_sweep([x for x in steps if kind(x) == k], lambda x: x["record"])[0]["record"].sweep
              for k in {kind(x) for x in steps}}
    for x in (x for x in steps if x["record"].sweep == newest[kind(x)]):
        lines.append(prose("summary.step", **_step(x), speedup=times(x["step_speedup"]),
                           base=fmt(x["baseline"].metrics.step_time_ms)))
    for x in comparisons.logging_rows(train):
        lines.append(prose("summary.logging", **_step(x), overhead=100 * x["overhead"],
                           quiet=fmt(x["quiet"].metrics.step_time_ms)))
    for x in comparisons.checkpoint_rows(train):
        lines.append(prose("summary.checkpoint", **_step(x), every=x["every_steps"], overhead=100 * x["overhead"],
                           off=fmt(x["off"].metrics.step_time_ms), stall=fmt(x["stall_ms"]),
                           share=100 * x["stall_share"], mb=x["bytes"] / 1e6, minutes=CKPT_REPORT_MINUTES,
                           training=100 * comparisons.stall_share(x["stall_ms"], 60 * CKPT_REPORT_MINUTES)))
    for r in newest_sweep(overlap):
        m = r.metrics
        lines.append(prose("summary.overlap", p=r.point, exposed=fmt(m.exposed_comm_ms),
                           alone=fmt(m.allreduce_alone_ms), hidden=100 * m.hidden_fraction, step=fmt(m.step_time_ms),
                           load=_load(r)))
    nodes = comparisons.multinode_records(train)
    if nodes:
        newest = newest_sweep(nodes)
        big = max(newest, key=lambda r: r.metrics.world_size)  # a 1-process run has no backend
        points = [prose("summary.node_count", m=r.metrics, rate=fmt(r.metrics.images_per_s),
                        efficiency=pct(r.metrics.scaling_efficiency), load=fmt(r.host_load_1m)) for r in newest]
        where = "SLURM test cluster" if "test cluster" in (big.note or "") else "SLURM"
        lines.append(prose("summary.multinode", big=big, where=where, points="; ".join(points)))
    return prose("summary.section", ratios=f"<details><summary>{len(lines)} ratios</summary>\n\n" + "\n".join(lines)
                 + "\n\n</details>" if lines else "_(no comparison records yet)_") + "\n"
