"""The report's plots as inline SVG: line panels (layer curves, forgetting curves, distances) and heat maps.

Figures are built with matplotlib's object API (`matplotlib.figure.Figure`: no pyplot, no global figure
state, no GUI backend), their text is drawn as paths (no font is needed to view them), and the SVG's ids
are salted with the figure's own name and its date left out: the same data gives the same bytes on every
render, and several figures share one HTML page without their ids colliding.
"""

from __future__ import annotations

import io
import math
import re

import matplotlib
import numpy as np
import polars as pl
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

PANELS_PER_ROW = 3
MAX_PANELS = 12  # a figure's panels beyond these are left out (their numbers are in the tables)
MAX_ANNOTATED_CELLS = 400
PANEL_SIZE = (4.0, 2.8)  # inches
LEGEND_WIDTH = 1.8  # inches


def svg(fig: Figure, name: str) -> str:
    """The figure as an `<svg>` element for an HTML page: deterministic bytes, no prolog or metadata."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": name, "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.DOTALL).strip()


def line_panels(data: pl.DataFrame, *, panel: str, series: str, x: str, name: str, xlabel: str, ylabel: str,
                legend: str, y: str = "mean", sd: str | None = "sd", xticks: dict | None = None) -> str:
    """One panel per distinct `panel` value (the first MAX_PANELS), one line per `series` value (x ascending)
    with a ±sd band, and one legend (titled `legend`) for all panels; `xticks`: tick labels by x value."""
    panels = data[panel].unique(maintain_order=True).to_list()[:MAX_PANELS]
    labels = data[series].unique(maintain_order=True).to_list()
    colors = _colors(len(labels))
    columns, rows = min(PANELS_PER_ROW, len(panels)), math.ceil(len(panels) / PANELS_PER_ROW)
    width, height = PANEL_SIZE[0] * columns + LEGEND_WIDTH, PANEL_SIZE[1] * rows + 0.3
    fig = Figure(figsize=(width, height))
    # fixed margins, not a layout engine: it would draw every figure twice
    fig.subplots_adjust(left=0.7 / width, right=1 - (LEGEND_WIDTH + 0.1) / width, bottom=0.55 / height,
                        top=1 - 0.35 / height, wspace=0.3, hspace=0.6)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, title in zip(axes, panels):
        part = data.filter(pl.col(panel) == title)
        for color, label in zip(colors, labels):
            line = part.filter(pl.col(series) == label).sort(x)
            if line.is_empty():
                continue
            xs, ys = line[x].to_numpy(), line[y].cast(pl.Float64).to_numpy()
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color=color, label=str(label))
            if sd is not None:
                spread = line[sd].cast(pl.Float64).fill_null(0.0).to_numpy()
                ax.fill_between(xs, ys - spread, ys + spread, color=color, alpha=0.2, linewidth=0)
        ax.set_title(str(title), fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if xticks:
            ax.set_xticks(list(xticks), list(xticks.values()), fontsize=6)
        elif data[x].dtype.is_integer():
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(panels):]:
        fig.delaxes(ax)
    handles, texts = axes[0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="upper left", bbox_to_anchor=(1 - LEGEND_WIDTH / width, 1 - 0.3 / height),
               fontsize=7, title=legend, title_fontsize=8, frameon=False)
    return svg(fig, name)


def heat_map(values: np.ndarray, rows: list[str], columns: list[str], *, name: str, title: str, xlabel: str,
             ylabel: str, fmt: str, centre: bool) -> str:
    """A matrix with its values written in the cells. `centre`: red below zero, green above (the college
    report's head deltas); otherwise each column is shaded from its own minimum to its maximum, so the best
    cell of each column (e.g. each final task of the sequential matrix) stands out."""
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
    fig = Figure(figsize=(max(4.0, 1.8 + 0.6 * len(columns)), max(2.4, 1.2 + 0.32 * len(rows))),
                 layout="constrained")
    ax = fig.subplots()
    mesh = ax.pcolormesh(np.ma.masked_invalid(shade), cmap=cmap, norm=norm, edgecolors="white", linewidth=0.5)
    ax.set_xlim(0, len(columns))
    ax.set_ylim(len(rows), 0)  # the first row on top, as in a table
    long = max((len(str(c)) for c in columns), default=0) > 4
    ax.set_xticks(np.arange(len(columns)) + 0.5, [str(c) for c in columns], fontsize=7,
                  rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_yticks(np.arange(len(rows)) + 0.5, [str(r) for r in rows], fontsize=7)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    if values.size <= MAX_ANNOTATED_CELLS:
        fills = mesh.cmap(norm(shade))
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value):  # white on dark cells
                dark = fills[i, j, :3] @ np.array([0.299, 0.587, 0.114]) < 0.5
                ax.text(j + 0.5, i + 0.5, format(value, fmt), ha="center", va="center", fontsize=6,
                        color="white" if dark else "black")
    if centre:
        fig.colorbar(mesh, ax=ax, shrink=0.8).ax.tick_params(labelsize=7)
    return svg(fig, name)


def _colors(n: int) -> list:
    """Distinct colours for up to 10 lines, an ordered ramp for more (e.g. one per layer)."""
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    return list(matplotlib.colormaps["viridis"](np.linspace(0.0, 0.95, n)))
