"""Report section: the scaling model, its inputs, predictions and the check against published points."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.harness.analysis.allreduce_fit import fit_alpha_beta, hop_latency
from hpc_imagenet.harness.analysis.parameters import parameter_count
from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.core.setups import GROUP_KEYS
from hpc_imagenet.harness.report import figures
from hpc_imagenet.harness.report.comm import allreduce_groups
from hpc_imagenet.harness.report.common import Environments, fmt, md_table, pct, plain_local
from studies.published_model import formulas as scaling_model, words
from studies.published_model.whole_step import model_overlap


def overlap_text(hidden_fraction: float, rec: Optional[Record], env: Environments) -> str:
    """One paragraph: which overlap record (if any) fed the model's measured-overlap column."""
    if rec is None:
        return words("model.no_overlap")
    m = rec.metrics
    return words("model.overlap", h=pct(hidden_fraction), rec=rec, p=rec.point, backend=rec.point.backend or "?",
                 env=env.id(rec), exposed=fmt(m.exposed_comm_ms), alone=fmt(m.allreduce_alone_ms),
                 ratio=fmt(m.exposed_comm_ms / m.allreduce_alone_ms))


def our_model(train: Sequence[Record], ar: Sequence[Record]
              ) -> Tuple[Optional[scaling_model.ModelInputs], List[Record], str]:
    """Model inputs from our records: 1-process compute step, the model's gradients, measured link."""
    train = [r for r in train if plain_local(r)]
    synthetic = [r for r in train if r.point.data == "dummy"] or list(train)
    singles = [r for r in synthetic if r.metrics.world_size == 1]
    groups = allreduce_groups(ar)
    if not singles or not groups:
        return None, [], "needs a 1-process train record and allreduce records"
    base = singles[-1]
    (_, _, n_ar), ar_rows = list(groups.items())[-1]
    fit = fit_alpha_beta([r.metrics for r in ar_rows])
    params = base.metrics.parameters or parameter_count(base.point.arch)
    if not fit or not params:
        return None, [], "allreduce fit or parameter count unavailable"
    per_param = 2 if base.point.precision in ("O2", "O3") else 4
    m = scaling_model.ModelInputs(step_time_s=base.metrics.step_time_ms / 1e3,
                                  batch_per_gpu=base.point.batch_size,
                       grad_bytes=params * per_param, busbw_intra=fit["busbw_bytes_per_s"],
                       alpha_intra_s=hop_latency(fit["alpha_s"], n_ar))
    same = [r for r in synthetic if r.sweep == base.sweep and r.metrics.world_size > 1
            and r.point_values(GROUP_KEYS) == base.point_values(GROUP_KEYS)]
    desc = (f"{base.point.arch} ({params} parameters x {per_param} bytes), 1-process step from record "
            f"{base.source}, link from the {n_ar}-process all-reduce fit")
    return m, same, desc


def _cited_inputs(link: dict, step_time_s: float, batch_per_gpu: int) -> scaling_model.ModelInputs:
    """A published system's model inputs: its model's gradients, the link specs LINK cites."""
    return scaling_model.ModelInputs(step_time_s=step_time_s, batch_per_gpu=batch_per_gpu,
                                     grad_bytes=parameter_count(link["arch"]) * link["grad_bytes_per_param"],
                                     busbw_intra=link["busbw_intra"], alpha_intra_s=link["alpha_intra_s"],
                                     gpus_per_node=link["gpus_per_node"], busbw_inter=link.get("busbw_inter"),
                                     alpha_inter_s=link.get("alpha_inter_s"))


def hal_model(pub: dict, links: dict, hidden_fraction: float) -> Tuple[scaling_model.ModelInputs, dict]:
    run = next(r for r in pub["hal_2020"]["runs"] if r["label"] == links["hal_2020"]["run"])
    m = _cited_inputs(links["hal_2020"], 1.0, run["batch_per_gpu"])
    n0, x0 = run["gpus"][0], run["train_img_per_s"][0]
    return scaling_model.calibrate(m, n0, n0 * run["batch_per_gpu"] / x0, hidden_fraction), run


def dle_model(pub: dict, links: dict) -> Tuple[scaling_model.ModelInputs, dict]:
    link = links["nvidia_dle_2021"]
    pts = pub["nvidia_dle_2021"]["train_img_per_s"][link["config"]]
    return _cited_inputs(link, link["batch_per_gpu"] / pts["1"], link["batch_per_gpu"]), pts


MODES = (("no overlap", "--"), ("measured overlap", "-."), ("full overlap", "-"))  # label, line style


def model_section(train: Sequence[Record], ar: Sequence[Record], overlap: Sequence[Record], pub: dict, links: dict,
                  env: Environments, fig_dir: Path) -> str:
    gpus = [2 ** i for i in range(11)]  # 1 to 1024
    h, h_rec = model_overlap(overlap)
    hidden = (scaling_model.NO_OVERLAP, h, scaling_model.FULL_OVERLAP)  # one per MODES entry
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
            pts = [scaling_model.predict(m, n, x) for n in gpus]
            line = {"label": f"{label}, {tag}", "x": gpus, "style": style, "color": c}
            thr.append(dict(line, y=[p["images_per_s"] for p in pts]))
            eff.append(dict(line, y=[p["efficiency"] for p in pts]))
    thr.append({"label": f"HAL 2020 published ({run['label']})", "x": run["gpus"], "y": run["train_img_per_s"],
                "style": "*", "color": "black"})
    if ours_measured:
        thr.append({"label": "this machine measured", "x": [r.metrics.world_size for r in ours_measured],
                    "y": [r.metrics.images_per_s for r in ours_measured], "style": "D",
                    "color": figures.palette(0)})
    figures.grid(fig_dir / "scaling_model.png", [
        {"title": "predicted throughput", "xlabel": "GPUs (processes)", "ylabel": "images/s", "series": thr,
         "xlog": True, "ylog": True, "legend_loc": "lower right"},  # the upper left hides published points
        {"title": "predicted scaling efficiency", "xlabel": "GPUs (processes)",
         "ylabel": "efficiency (fraction of linear)", "series": eff, "xlog": True, "ymin0": True},
    ], f"Scaling model: compute + ring all-reduce; no, measured (h = {pct(h)}) and full overlap")
    return _model_text(scenarios, hidden, gpus, ours_desc, ours, ours_measured, pub, links, run,
                       overlap_text(h, h_rec, env))


INPUTS_COLUMNS = ("scenario", "t_c {modes[0]} (ms)", "t_c {modes[1]} (ms)", "t_c {modes[2]} (ms)", "batch/GPU",
                  "gradient MB", "intra busbw (GB/s)", "intra hop latency (us)", "GPUs/node", "inter busbw (GB/s)",
                  "inter hop latency (us)")
PRED_COLUMNS = ("scenario", "GPUs", "comm ms/step", "exposed ms/step (measured overlap)", "images/s ({modes[0]})",
                "efficiency ({modes[0]})", "images/s ({modes[1]})", "efficiency ({modes[1]})", "images/s ({modes[2]})",
                "efficiency ({modes[2]})")
CHECK_COLUMNS = ("measured", "GPUs", "measured images/s", "predicted ({modes[0]})", "error", "predicted ({modes[1]})",
                 "error", "predicted ({modes[2]})", "error")


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
            ps = [scaling_model.predict(m, n, x) for m, x in zip(ms, hidden)]
            pred.append([label, n, ps[0]["comm_time_s"] * 1e3, ps[1]["exposed_comm_s"] * 1e3,
                         *(c for p in ps for c in (p["images_per_s"], pct(p["efficiency"])))])

    def check_row(name, ms, gpus, published):
        ys = [scaling_model.predict(m, gpus, h)["images_per_s"] for m, h in zip(ms, hidden)]
        return [name, gpus, published, *(c for y in ys for c in (y, pct(scaling_model.relative_error(y, published))))]

    hal = next(ms for label, ms in scenarios if label.startswith("HAL"))
    check = [check_row(f"HAL 2020 ({run['label']})", hal, n, x) for n, x in zip(run["gpus"], run["train_img_per_s"])]
    dle, dle_pts = dle_model(pub, links)
    check += [check_row(f"NVIDIA DLE {links['nvidia_dle_2021']['config']}", [dle] * len(MODES), n, dle_pts[str(n)])
              for n in sorted(int(k) for k in dle_pts)]
    check += [check_row(f"this machine ({r.source})", [ours] * len(MODES), r.metrics.world_size,
                        r.metrics.images_per_s) for r in ours_measured]
    hal_rows = [c for c in check if c[0].startswith("HAL")]
    worst = [max(abs(scaling_model.relative_error(c[3 + 2 * i], c[2])) for c in hal_rows) for i in range(len(MODES))]
    sources = "\n".join(f"- {k}: {v}" for sec in ("hal_2020", "nvidia_dle_2021") for k, v in links[sec].items()
                        if k.endswith("_source"))
    largest = ", ".join(f"{pct(w)} with {t}" for w, t in zip(worst, modes))
    return words("model.section", backward=scaling_model.BACKWARD_FRACTION,
                 bucket_mib=scaling_model.DDP_BUCKET_BYTES / (1 << 20), h_text=h_text, ours_desc=ours_desc,
                 inputs=md_table(INPUTS_COLUMNS, inputs, modes=modes), sources=sources,
                 pred=md_table(PRED_COLUMNS, pred, modes=modes),
                 check=md_table(CHECK_COLUMNS, check, modes=modes)
                 + (f"\n{words('model.largest', worst=largest)}\n" if hal_rows else ""))
