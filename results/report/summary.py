"""Report section: the headline ratios, each from the newest sweep that has it."""
from __future__ import annotations

from typing import Sequence

from results.analysis import comparisons
from results.core.kinds import Record
from results.core.records import newest_sweep
from results.report.common import data_label, fmt, pct
from results.core.setups import CKPT_REPORT_MINUTES


def _load(record: Record) -> str:
    """The load the machine had when RECORD was measured, and where the record is."""
    return f"host load {fmt(record.host_load_1m)} (`{record.source}`)"


def summary_section(train: Sequence[Record], io: Sequence[Record], overlap: Sequence[Record] = (),
                    steady: Sequence[Record] = ()) -> str:
    """The headline ratios, each from the newest sweep that has it, with the load at the time."""
    lines = []
    ratios = [r for r in steady if r.metrics.ratio_per_core and r.point.backend != "baseline"]
    for r in newest_sweep(ratios):
        p, m = r.point, r.metrics
        lines.append(f"- Data pipeline, steady state, `{p.backend}` vs `baseline` ({p.split}, "
                     f"{p.workers} workers, {p.image_size}px, {p.images} images x {m.rounds} "
                     f"rounds in lockstep): {comparisons.times(m.ratio_per_core)} images/s per core (range "
                     f"{comparisons.times(m.ratio_min)}-{comparisons.times(m.ratio_max)}); {_load(r)}")
    # the engine's default backend; the other backends are in the section's table and figure
    pipe = [x for x in comparisons.pipeline_rows(io)
            if x["per_core_ratio"] and x["record"].point.backend == "fast"]
    for x in newest_sweep(pipe, lambda x: x["record"]):
        p, m = x["record"].point, x["record"].metrics
        lines.append(f"- Data pipeline, `{p.backend}` vs `baseline` ({p.workers} workers, {p.cache} "
                     f"cache, {p.image_size}px): {comparisons.times(x['per_core_ratio'])} images/s per core "
                     f"({fmt(m.images_per_cpu_s)} vs {fmt(x['baseline'].metrics.images_per_cpu_s)}), "
                     f"{comparisons.times(x['wall_ratio'])} wall images/s; {_load(x['record'])}")
    steps = [x for x in comparisons.step_rows(train)
             if x["step_speedup"] and x["record"].point.setup != "baseline"]

    def kind(record: Record) -> tuple:  # the newest sweep of each device and kind of data: a GPU sweep hides no CPU one
        return comparisons.on_gpu(record["record"]), record["record"].point.data == "dummy"
    newest = {k: newest_sweep([x for x in steps if kind(x) == k], lambda x: x["record"])[0]["record"].sweep
              for k in {kind(x) for x in steps}}
    for x in (x for x in steps if x["record"].sweep == newest[kind(x)]):
        p, m = x["record"].point, x["record"].metrics
        lines.append(f"- Training step, `{p.setup}` vs `baseline` ({data_label(p.data)}, {p.arch} "
                     f"{p.image_size}px, batch {p.batch_size}, {p.world_size} process, "
                     f"{m.device}): {comparisons.times(x['step_speedup'])} ({fmt(m.step_time_ms)} vs "
                     f"{fmt(x['baseline'].metrics.step_time_ms)} ms/step); {_load(x['record'])}")
    for x in comparisons.logging_rows(train):
        p, m, q = x["record"].point, x["record"].metrics, x["quiet"].metrics
        lines.append(f"- Logging overhead ({data_label(p.data)}, {p.arch} {p.image_size}px, batch "
                     f"{p.batch_size}, {m.device}): printing and TensorBoard step scalars at every step "
                     f"cost {100 * x['overhead']:+.1f}% step time ({fmt(m.step_time_ms)} vs "
                     f"{fmt(q.step_time_ms)} ms/step logging once per epoch); {_load(x['record'])}")
    for x in comparisons.checkpoint_rows(train):
        p, m, o = x["record"].point, x["record"].metrics, x["off"].metrics
        lines.append(f"- Checkpoint overhead ({data_label(p.data)}, {p.arch} {p.image_size}px, batch "
                     f"{p.batch_size}, {m.device}): a background checkpoint every {x['every_steps']} "
                     f"steps cost {100 * x['overhead']:+.1f}% step time ({fmt(m.step_time_ms)} vs "
                     f"{fmt(o.step_time_ms)} ms/step with epoch-end checkpoints only); the step stalls "
                     f"{fmt(x['stall_ms'])} ms per checkpoint, {100 * x['stall_share']:.2f}% of the "
                     f"{x['every_steps']} steps between two, and each writes {x['bytes'] / 1e6:.0f} MB; at one "
                     f"checkpoint per {CKPT_REPORT_MINUTES} minutes (the batch files') that stall is "
                     f"{100 * comparisons.stall_share(x['stall_ms'], 60 * CKPT_REPORT_MINUTES):.3f}% of training "
                     f"time; {_load(x['record'])}")
    for r in newest_sweep(overlap):
        p, m = r.point, r.metrics
        lines.append(f"- DDP communication overlap ({p.arch} {p.image_size}px, batch {p.batch_size}, "
                     f"{p.world_size} gloo processes, {p.bucket_cap_mb:g} MB buckets): "
                     f"{fmt(m.exposed_comm_ms)} ms of the {fmt(m.allreduce_alone_ms)} ms gradient "
                     f"all-reduce stays exposed per step ({100 * m.hidden_fraction:.0f}% hidden; step "
                     f"{fmt(m.step_time_ms)} ms); {_load(r)}")
    nodes = comparisons.multinode_records(train)
    if nodes:
        newest = newest_sweep(nodes)
        big = max(newest, key=lambda r: r.metrics.world_size)  # a 1-process run has no backend
        where = "SLURM test cluster" if "test cluster" in (big.note or "") else "SLURM"
        lines.append(f"- Multi-node {big.metrics.backend} DDP ({where}, {big.point.arch}): "
                     + "; ".join(
            f"{r.metrics.nodes} node(s) {fmt(r.metrics.images_per_s)} images/s, efficiency "
            f"{pct(r.metrics.scaling_efficiency)}, host load {fmt(r.host_load_1m)}" for r in newest))
    return ("## Headline ratios\n\nComputed from the records below (newest sweep of each kind):\n\n"
            + ("<details><summary>" + f"{len(lines)} ratios</summary>\n\n" + "\n".join(lines) + "\n\n</details>\n"
               if lines else "_(no comparison records yet)_\n"))
