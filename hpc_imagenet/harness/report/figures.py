"""Matplotlib figures for the report; every function takes prepared series and writes one PNG.

Series are plain dicts built by :mod:`hpc_imagenet.harness.report` from records, so what a figure shows is the
same data as the table printed under it. The Agg backend: no display needed on a cluster node.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator

from hpc_imagenet.harness.analysis.comparisons import times
from hpc_imagenet.harness.analysis.efficiency import efficiencies

log = logging.getLogger(__name__)

Series = Dict[str, object]  # {"label", "x", "y", optional "style", "labels" (per-point text)}
DPI = 120


def _int_ticks(ax, axis: str = "x") -> None:
    """Plain numbers (1, 2, 4, 600) instead of 2^n or 6x10^2 on log axes."""
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _save(fig, path: Path, layout: bool = True, **savefig_kw) -> Path:
    """Write FIG to PATH and close it; LAYOUT: lay it out first (callers that placed things themselves
    pass False, with their own savefig options)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, **savefig_kw)
    plt.close(fig)
    log.info("wrote %s", path)
    return path


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _draw(ax, series: Sequence[Series]) -> None:
    """Series with optional error bars ("err": one std per point, or "err_lo"/"err_hi") and labels."""
    for s in series:
        lo_hi = s.get("err_lo") is not None
        err = [s["err_lo"], s["err_hi"]] if lo_hi else s.get("err")
        look = {"label": s["label"], "color": s.get("color"), "alpha": s.get("alpha", 1.0)}
        if err is not None and any(err[0] + err[1] if lo_hi else err):
            ax.errorbar(s["x"], s["y"], yerr=err, fmt=s.get("style", "o-"), capsize=3, **look)
        else:
            ax.plot(s["x"], s["y"], s.get("style", "o-"), **look)
        offset = (5, 5) if s.get("label_above") else (5, -12)  # two series that meet keep their labels apart
        for x, y, t in zip(s["x"], s["y"], s.get("labels") or []):
            ax.annotate(t, (x, y), textcoords="offset points", xytext=offset, fontsize=8, color=s.get("color"))


def _log_y_ticks(ax) -> None:
    """Enough labelled ticks on a log axis even when the data spans less than a decade."""
    low, high = ax.get_ylim()
    subs = (1.0, 2.0, 3.0, 5.0, 7.0) if high / max(low, 1e-12) < 10 else (1.0, 2.0, 5.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))


def axes(path: Path, series: Sequence[Series], title: str, empty: str, xlabel: str, ylabel: str,
          size: tuple = (6.4, 4.4), setup=None, which: str = "major") -> Path:
    """One axes of SERIES (SETUP(ax) after drawing them: scales, ticks, marks), or the text EMPTY without any."""
    fig, ax = plt.subplots(figsize=size)
    if not series:
        _empty(ax, empty)
    else:
        _draw(ax, series)
        if setup:
            setup(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which=which, alpha=0.3)
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def _panels(panels: Sequence[Dict[str, object]], ncols: int, height: float = 4.2):
    """A figure of PANELS, NCOLS to a row, each 6.0 x HEIGHT; the unused axes hidden. Returns it and each
    panel's axes."""
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, height * nrows), squeeze=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:len(panels)]


def grid(path: Path, panels: Sequence[Dict[str, object]], suptitle: str, ncols: int = 2) -> Path:
    """Panels with linear or log axes: {"title", "xlabel", "ylabel", "series", "xlog", "ylog"}."""
    fig, axes = _panels(panels, ncols)
    for ax, panel in zip(axes, panels):
        ax.set_title(panel["title"], fontsize=10)
        if not panel["series"]:
            _empty(ax, panel.get("empty", "no data"))
            continue
        _draw(ax, panel["series"])
        if panel.get("xlog"):
            ax.set_xscale("log", base=2)
            _int_ticks(ax)
        if panel.get("ylog"):
            ax.set_yscale("log")
        if panel.get("int_x"):
            ax.set_xticks(sorted({x for s in panel["series"] for x in s["x"]}))
            _int_ticks(ax)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel(panel["ylabel"])
        if panel.get("ymin0"):
            ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc=panel.get("legend_loc", "best"))
    fig.suptitle(suptitle, fontsize=11)
    return _save(fig, path)


def size_label(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def allreduce(path: Path, series: Sequence[Series], title: str) -> Path:
    def setup(ax) -> None:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v)))
        for label in ax.get_xticklabels():
            label.set_rotation(30)
    return axes(path, series, title, "no allreduce records", "message size", "bandwidth (GB/s, 1e9 bytes/s)",
                 size=(6.8, 4.4), setup=setup, which="both")


def spread(label: str, pts: Sequence, **style: object) -> Series:
    """A line through folded repeats (hpc_imagenet.harness.analysis.spread.Point): their means, the std as error
    bars."""
    return {"label": label, "x": [p.x for p in pts], "y": [p.mean for p in pts], "err": [p.std for p in pts], **style}


def palette(index: int) -> str:
    return plt.rcParams["axes.prop_cycle"].by_key()["color"][index % 10]


IDEAL_LABEL = "ideal linear scaling (dotted)"


def with_ideal(series: Sequence[Series], time: bool = False) -> List[Series]:
    """Each series labelled with its scaling efficiency against its first point, then its ideal line from
    that point (dotted; only the first enters the legend): y0 x / x0 for a rate, y0 x0 / x for a TIME."""
    out: List[Series] = []
    for i, s in enumerate(series):
        xs, ys = list(s["x"]), list(s["y"])
        eff = efficiencies(xs, [1 / y for y in ys] if time else ys)
        ideal = [ys[0] * xs[0] / x for x in xs] if time else [ys[0] * x / xs[0] for x in xs]
        out += [dict(s, labels=[f"{100 * e:.0f}%" for e in eff]), {
            "label": IDEAL_LABEL if i == 0 else "_nolegend_", "x": xs, "y": ideal, "style": ":",
            "color": s.get("color"), "alpha": 0.8}]
    return out


def bars(path: Path, panels: Sequence[Dict[str, object]], suptitle: str) -> Path:
    """Grouped bar panels: {"title", "ylabel", "categories", "bars": [{"label", "values", "texts"}]}.

    A missing value (None) leaves a gap, so a backend absent from one group does not shift the others.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.6), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        ax.set_title(panel["title"], fontsize=10)
        cats, groups = panel.get("categories") or [], panel.get("bars") or []
        if not cats or not groups:
            _empty(ax, panel.get("empty", "no data"))
            continue
        width = 0.8 / len(groups)
        for i, g in enumerate(groups):
            xs = [c + (i - (len(groups) - 1) / 2) * width for c in range(len(cats))]
            pts = [(x, v, t) for x, v, t in zip(xs, g["values"], g.get("texts") or [""] * len(xs)) if v is not None]
            ax.bar([x for x, _, _ in pts], [v for _, v, _ in pts], width, label=g["label"], color=palette(i))
            for x, v, t in pts:
                ax.annotate(t, (x, v), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, fontsize=8)
        ax.set_ylabel(panel["ylabel"])
        ax.margins(y=0.12)  # room for the value labels above the tallest bar
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(suptitle, fontsize=11)
    return _save(fig, path)


def ratio_bars(cell: Dict[tuple, dict], cats: Sequence[str], groups: Sequence[str], metric: str,
               ratio: Optional[str]) -> List[Dict[str, object]]:
    """The "bars" of a bars() panel: one per group, over CATS, of the METRIC of the record of the comparison
    row CELL[(category, group)] ({"record", RATIO: its ratio to the baseline, the bar's text})."""
    return [{"label": g, "values": [getattr(cell[(c, g)]["record"].metrics, metric) if (c, g) in cell else None
                                    for c in cats],
             "texts": [times(cell[(c, g)][ratio]) if ratio and (c, g) in cell and cell[(c, g)][ratio] else ""
                       for c in cats]} for g in groups]


def comparison_cells(rows: Sequence[dict], category: Callable, group: Callable) -> Tuple[List[str], Dict[tuple, dict]]:
    """The categories of comparison ROWS ({"record", ...}): CATEGORY(record) in the order met, with the sweep
    where the rows span several; and each row under its (category, GROUP(record)): ratio_bars' CELL."""
    multi = len({x["record"].sweep for x in rows}) > 1
    cell = {(category(x["record"]) + (f"\n[{x['record'].sweep}]" if multi else ""), group(x["record"])): x
            for x in rows}
    return list(dict.fromkeys(c for c, _ in cell)), cell


def report_panels(path: Path, panels: Sequence[Dict[str, object]], suptitle: str, ncols: int = 0,
                  shared_legend: bool = False) -> Path:
    """Panels for a per-cluster report (ncols per row; 0: all in one row), legends off the data: under
    each panel, or once under the figure when every panel draws the same series (shared_legend).

    A panel: {"title", "xlabel", "ylabel", "series", optional "xlog", "ylog", "int_x", "ymin0"}.
    """
    entries = max((len([s for s in p["series"] if s["label"] != "_nolegend_"]) for p in panels), default=1)
    fig, axes = _panels(panels, ncols or len(panels), 4.2 + (0.0 if shared_legend else 0.22 * entries))
    for ax, panel in zip(axes, panels):
        _panel(ax, panel)
        if not shared_legend:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    if shared_legend:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
                   ncols=min(2, len(labels)))
    fig.suptitle(suptitle, fontsize=11)
    # keep the suptitle's lines clear of the panel titles, whatever the figure's height
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.2 * (suptitle.count("\n") + 1) / fig.get_figheight()))
    return _save(fig, path, layout=False, bbox_inches="tight")


def _panel(ax, panel: Dict[str, object]) -> None:
    ax.set_title(panel["title"], fontsize=10)
    _draw(ax, panel["series"])
    xs = sorted({x for s in panel["series"] for x in s["x"]})
    if panel.get("xlog"):
        ax.set_xscale("log", base=2)
    if panel.get("ylog"):
        ax.set_yscale("log")
        _log_y_ticks(ax)
        _int_ticks(ax, "y")
    if panel.get("int_x", True) and xs:
        ax.set_xticks(xs)
        _int_ticks(ax)
        if len(xs) == 1:
            ax.set_xlim(xs[0] / 2, xs[0] * 2) if panel.get("xlog") else ax.set_xlim(xs[0] - 1, xs[0] + 1)
    if panel.get("ymin0"):
        ax.set_ylim(bottom=0)
    ax.margins(x=0.08)
    ax.set_xlabel(panel["xlabel"])
    ax.set_ylabel(panel["ylabel"])
    ax.grid(True, which="both", alpha=0.3)


def hbars(path: Path, labels: Sequence[str], means: Sequence[float], stds: Sequence[float], xlabel: str,
          title: str, texts: Sequence[str] = ()) -> Path:
    """One horizontal bar per configuration (mean, std as the error bar), labels on the axis."""
    fig, ax = plt.subplots(figsize=(8.5, 1.0 + 0.42 * len(labels)))
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, means, xerr=[s or 0 for s in stds], color=palette(0), capsize=3, alpha=0.85)
    for y, m, sd, t in zip(ys, means, stds, texts or [""] * len(ys)):
        ax.annotate(t, (m + (sd or 0), y), textcoords="offset points", xytext=(6, -3), fontsize=8)  # past the bar
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.margins(x=0.15)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return _save(fig, path, layout=False, bbox_inches="tight")
