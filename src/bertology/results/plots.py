"""The report's plots as inline SVG: interval panels (the main result), line panels (level curves,
forgetting curves, distances) and heat maps.

Figures are built with matplotlib's object API (`matplotlib.figure.Figure`: no pyplot, no global figure
state, no GUI backend). Their text stays text (`svg.fonttype: none`: searchable, selectable, and sized in
points, none under FONT), and the SVG's ids are salted with the figure's own name and its date left out:
the same data gives the same bytes on every render, and several figures share one HTML page without their
ids colliding. What keeps noise from reading as a finding: panels of one metric share a y-range,
perplexity gets a log axis, intervals are drawn, and a heat map of differences is centred on 0 with the
cells whose interval includes 0 marked.
"""

from __future__ import annotations

import io
import math
import re

import matplotlib
import matplotlib.patches
import numpy as np
import polars as pl
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

PANELS_PER_ROW = 3
MAX_PANELS = 12  # a figure's panels beyond these are left out (their numbers are in the tables)
MAX_ANNOTATED_CELLS = 400
MAX_BARS = 12  # variants a panel draws as bars; more are drawn as points with intervals
PANEL_SIZE = (4.4, 3.2)  # inches
INTERVAL_PANEL_WIDTH = 3.4  # inches, the least: a few variants' bars need no more, and two panels fit a narrow page
LEGEND_WIDTH = 2.2  # inches
FONT = 10  # points: no text is smaller
TITLE_FONT = 11
LOG_METRICS = ("perplexity",)  # metrics drawn on a log axis
NOT_SIGNIFICANT = "n.s."  # the mark of a heat-map cell whose interval includes 0
BASELINE = "baseline (dashed)"  # the legend entry of the unmodified model's lines
REPORT = "report"  # the legend entry of the values the study's paper printed, drawn beside ours
REPORT_COLOR = "tab:red"


def svg(fig: Figure | None, name: str) -> str | None:
    """The figure as an `<svg>` element for an HTML page: deterministic bytes, no prolog or metadata (None
    for no figure)."""
    if fig is None:
        return None
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": name, "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.DOTALL).strip()


def interval_panels(data: pl.DataFrame, *, name: str, **options) -> str | None:
    """`interval_figure` as SVG."""
    return svg(interval_figure(data, **options), name)


def line_panels(data: pl.DataFrame, *, name: str, **options) -> str | None:
    """`line_figure` as SVG."""
    return svg(line_figure(data, **options), name)


def heat_map(values: np.ndarray, rows: list[str], columns: list[str], *, name: str, **options) -> str:
    """`heat_map_figure` as SVG."""
    return svg(heat_map_figure(values, rows, columns, **options), name)


def interval_figure(data: pl.DataFrame, *, panel: str, metric: str = "metric",
                    baseline: str | None = None, report: str | None = None) -> Figure | None:
    """The main result: one panel per distinct `panel` value (the first MAX_PANELS), the variants along x
    in the frame's order, each its `mean` with its 95% interval (`ci_low`, `ci_high`, where there is one)
    as a bar, or as a point when there are more than MAX_BARS variants or the metric is on a log axis; the
    `baseline` variant's mean as a dashed line across the panel; the `report` column's values (what the
    study's paper printed for the same group) as red diamonds on the same axes, labelled REPORT, each
    panel's in an SVG group `report-<panel index>`. None when no variant has a mean."""
    data = data.filter(pl.col("mean").is_not_null())
    if data.is_empty():
        return None
    panels = data[panel].unique(maintain_order=True).to_list()[:MAX_PANELS]
    variants = data["variant"].unique(maintain_order=True).to_list()
    points = len(variants) > MAX_BARS
    per_variant = 0.22 if points else 0.45
    panel_width = max(INTERVAL_PANEL_WIDTH, 1.2 + per_variant * len(variants))
    columns = max(1, min(PANELS_PER_ROW, len(panels), int(14 // panel_width)))
    rows = math.ceil(len(panels) / columns)
    label_room = 0.1 * max(len(str(v)) for v in variants) + 0.5
    width, height = panel_width * columns, (PANEL_SIZE[1] + label_room) * rows + 0.6
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=1.1 / width, right=1 - 0.2 / width, bottom=label_room / height,
                        top=1 - 0.75 / height, wspace=0.35, hspace=(label_room + 0.7) / PANEL_SIZE[1])
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    x = {v: i for i, v in enumerate(variants)}
    for ax, title in zip(axes, panels):
        part = data.filter(pl.col(panel) == title)
        xs = np.array([x[v] for v in part["variant"]])
        mean = part["mean"].cast(pl.Float64).to_numpy()
        low = part["ci_low"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        high = part["ci_high"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        log = _is_log(part[metric][0])
        error = np.vstack([np.nan_to_num(mean - low), np.nan_to_num(high - mean)])
        if points or log:
            ax.errorbar(xs, mean, yerr=error, fmt="o", markersize=4, color="tab:blue", ecolor="0.3",
                        elinewidth=1, capsize=2)
        else:
            ax.bar(xs, mean, color="tab:blue", alpha=0.75, width=0.7)
            ax.errorbar(xs, mean, yerr=error, fmt="none", ecolor="0.2", elinewidth=1, capsize=3)
        printed = part.filter(pl.col(report).is_not_null()) if report is not None else part.clear()
        if printed.height:
            dots = ax.scatter([x[v] for v in printed["variant"]], printed[report].cast(pl.Float64).to_numpy(),
                              marker="D", s=36, color=REPORT_COLOR, edgecolors="white", linewidths=0.8,
                              zorder=4, label=REPORT)
            dots.set_gid(f"report-{panels.index(title)}")
        base = part.filter(pl.col("variant") == baseline)["mean"] if baseline is not None else []
        if len(base):
            ax.axhline(base[0], color="0.3", linestyle="--", linewidth=1,
                       label=baseline if "baseline" in str(baseline) else f"{baseline} (baseline)")
        if log:
            ax.set_yscale("log")
        ax.set_xticks(range(len(variants)), [str(v) for v in variants], fontsize=FONT, rotation=90)
        ax.set_xlim(-0.6, len(variants) - 0.4)
        _style(ax, title, "variant", str(part[metric][0]))
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    _share_y(axes[:len(panels)], [data.filter(pl.col(panel) == t)[metric][0] for t in panels])
    handles = {}
    for ax in axes[:len(panels)]:  # the baseline's line and the report's diamonds, wherever a panel has them
        for handle, text in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(text, handle)
    if handles:  # one legend for the figure, above the panels
        fig.legend(list(handles.values()), list(handles), loc="upper right", bbox_to_anchor=(1, 1),
                   fontsize=FONT, frameon=False)
    return fig


def line_figure(data: pl.DataFrame, *, panel: str, series: str, x: str, xlabel: str, ylabel: str, legend: str,
                y: str = "mean", sd: str | None = "sd", xticks: dict | None = None, metric: str | None = None,
                baseline: dict | None = None) -> Figure | None:
    """One panel per distinct `panel` value that has at least two points along x (the first MAX_PANELS; a
    one-point panel is no curve: its number is in the table), one line per `series` value (x ascending)
    with a ±sd band, and one legend (titled `legend`) for all panels; `xticks`: tick labels by x value.
    `metric`: the column naming each panel's metric (else `ylabel` is the metric): panels of one metric
    share a y-range, and perplexity is drawn on a log axis. `baseline`: (panel, series) -> the unmodified
    model's value, a dashed line in the series' colour across that panel. None when no panel has two
    points."""
    spread = data.group_by(panel).agg(pl.col(x).n_unique().alias("_points"))
    curved = set(spread.filter(pl.col("_points") >= 2)[panel].to_list())
    panels = [p for p in data[panel].unique(maintain_order=True).to_list() if p in curved][:MAX_PANELS]
    if not panels:
        return None
    labels = data[series].unique(maintain_order=True).to_list()
    colors = _colors(len(labels))
    columns, rows = min(PANELS_PER_ROW, len(panels)), math.ceil(len(panels) / PANELS_PER_ROW)
    width, height = PANEL_SIZE[0] * columns + LEGEND_WIDTH, PANEL_SIZE[1] * rows + 0.3
    fig = Figure(figsize=(width, height))
    # fixed margins, not a layout engine: it would draw every figure twice
    fig.subplots_adjust(left=0.8 / width, right=1 - (LEGEND_WIDTH + 0.1) / width, bottom=0.7 / height,
                        top=1 - 0.4 / height, wspace=0.35, hspace=0.7)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    metrics = []
    for ax, title in zip(axes, panels):
        part = data.filter(pl.col(panel) == title)
        metrics.append(part[metric][0] if metric else ylabel)
        for color, label in zip(colors, labels):
            line = part.filter(pl.col(series) == label).sort(x)
            if line.is_empty():
                continue
            xs, ys = line[x].to_numpy(), line[y].cast(pl.Float64).to_numpy()
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color=color, label=str(label))
            if sd is not None:
                band = line[sd].cast(pl.Float64).fill_null(0.0).to_numpy()
                ax.fill_between(xs, ys - band, ys + band, color=color, alpha=0.2, linewidth=0)
            if baseline and baseline.get((title, label)) is not None:
                ax.axhline(baseline[(title, label)], color=color, linestyle="--", linewidth=1, label=BASELINE)
        if _is_log(metrics[-1]):
            ax.set_yscale("log")
        _style(ax, title, xlabel, ylabel)
        if xticks:
            ax.set_xticks(list(xticks), list(xticks.values()), fontsize=FONT)
        elif data[x].dtype.is_integer():
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    _share_y(axes[:len(panels)], metrics)
    handles = {}
    for ax in axes[:len(panels)]:  # every line once, the baseline's too
        for handle, text in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(text, handle)
    if handles.pop(BASELINE, None) is not None:  # last, in grey: each curve's baseline is in its own colour
        handles[BASELINE] = Line2D([], [], color="0.3", linestyle="--", linewidth=1)
    fig.legend(list(handles.values()), list(handles), loc="upper left",
               bbox_to_anchor=(1 - LEGEND_WIDTH / width, 1 - 0.3 / height), fontsize=FONT, title=legend,
               title_fontsize=FONT, frameon=False)
    return fig


def heat_map_figure(values: np.ndarray, rows: list[str], columns: list[str], *, title: str, xlabel: str,
                    ylabel: str, fmt: str, centre: bool, label: str = "", unclear: np.ndarray | None = None) -> Figure:
    """A matrix with its values written in the cells. `centre`: differences, on a colour scale symmetric
    around 0 (red below, green above: the college report's head deltas) with a colour bar titled `label`,
    and the cells `unclear` marks (their interval includes 0, or there is none) hatched and marked
    NOT_SIGNIFICANT; otherwise each column is shaded from its own minimum to its maximum, so the best cell
    of each column (e.g. each final task of the sequential matrix) stands out."""
    values = np.asarray(values, dtype=float)
    if centre:
        limit = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
        shade, norm, cmap = values, Normalize(-(limit or 1.0), limit or 1.0), "RdYlGn"
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
            shade = np.where(high > low, (values - low) / (high - low), 0.5)
        shade[~np.isfinite(values)] = np.nan
        norm, cmap = Normalize(0.0, 1.0), "Greens"
    fig = Figure(figsize=(max(4.5, 2.4 + 0.8 * len(columns)), max(2.8, 1.6 + 0.42 * len(rows))),
                 layout="constrained")
    ax = fig.subplots()
    mesh = ax.pcolormesh(np.ma.masked_invalid(shade), cmap=cmap, norm=norm, edgecolors="white", linewidth=0.5)
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(rows), 0)  # the first row on top, as in a table
    long = max((len(str(c)) for c in columns), default=0) > 4
    ax.set_xticks(np.arange(len(columns)) + 0.5, [str(c) for c in columns], fontsize=FONT,
                  rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_yticks(np.arange(len(rows)) + 0.5, [str(r) for r in rows], fontsize=FONT)
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.set_title(title, fontsize=TITLE_FONT)
    marked = np.zeros(values.shape, bool) if unclear is None else np.asarray(unclear, bool) & np.isfinite(values)
    for i, j in zip(*np.nonzero(marked)):  # hatched: no colour alone says "no clear difference"
        ax.add_patch(matplotlib.patches.Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="0.55",
                                                  linewidth=0))
    if values.size <= MAX_ANNOTATED_CELLS:
        fills = mesh.cmap(norm(shade))
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value):  # white on dark cells
                dark = fills[i, j, :3] @ np.array([0.299, 0.587, 0.114]) < 0.5
                text = format(value, fmt) + (f"\n{NOT_SIGNIFICANT}" if marked[i, j] else "")
                ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=FONT,
                        color="white" if dark else "black", linespacing=0.9)
    if centre:
        bar = fig.colorbar(mesh, ax=ax, shrink=0.8)
        bar.ax.tick_params(labelsize=FONT)
        bar.set_label(label, fontsize=FONT)
    return fig


def _style(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(str(title), fontsize=TITLE_FONT)
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.grid(alpha=0.3)


def _is_log(metric) -> bool:
    return str(metric) in LOG_METRICS


def _share_y(axes, metrics: list) -> None:
    """Panels of one metric get the union of their y-ranges, so that heights compare across panels; a log
    axis gets plain-number ticks (evenly spaced within a decade, where the log ticks would be few)."""
    for metric in set(map(str, metrics)):
        same = [ax for ax, m in zip(axes, metrics) if str(m) == metric]
        low = min(ax.get_ylim()[0] for ax in same)
        high = max(ax.get_ylim()[1] for ax in same)
        for ax in same:
            ax.set_ylim(low, high)
            if ax.get_yscale() == "log":
                if high < 10 * low:
                    ax.yaxis.set_major_locator(MaxNLocator(5))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 100 else f"{v:.3g}"))
                ax.yaxis.set_minor_formatter(NullFormatter())


def _colors(n: int) -> list:
    """Distinct colours for up to 10 lines, an ordered ramp for more (e.g. one per layer)."""
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    return list(matplotlib.colormaps["viridis"](np.linspace(0.0, 0.95, n)))
