"""PNG plots (matplotlib, Agg). Each helper draws tidy data and returns a ``Figure``; NaN points are
left out of lines (gaps), never drawn as zeros. Titles say whether the data is measured or modelled."""
from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from .common import Figure, Table

ENABLED: ContextVar[bool] = ContextVar("speedbench_report_plots", default=True)


@contextlib.contextmanager
def enabled(on: bool):
    """Turn plotting on or off (tables and text are unaffected) for the enclosed calls."""
    token = ENABLED.set(on)
    try:
        yield
    finally:
        ENABLED.reset(token)


@dataclass
class Series:
    label: str
    x: list[float]
    y: list[float]
    style: str = "-o"  # matplotlib format string
    kind: str = "measured"  # measured | modelled (say so in the label too)
    color: str | None = None  # matplotlib colour; one per mechanism keeps a mechanism's curves together
    low: list[float] | None = None  # the interval around each y (drawn as error bars; NaN: none at that point)
    high: list[float] | None = None


@dataclass
class Axes:
    xlabel: str
    ylabel: str
    title: str
    logx: bool = False
    logy: bool = False
    integer_x: bool = False  # draft lengths and positions: integer ticks only
    hlines: list[tuple[float, str]] = field(default_factory=list)
    vlines: list[tuple[float, str]] = field(default_factory=list)
    note: str = ""  # written on the figure under the axes (what the reader must know to read it)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


LEGEND_INSIDE = 4  # more entries than this: the legend goes right of the axes, off the lines


def _errors(s: "Series") -> tuple[list[float], list[float], list[float], list[float]] | None:
    """(x, y, below, above) of the points that have a finite interval around a finite y."""
    if s.low is None or s.high is None:
        return None
    pts = [(float(x), float(y), float(y) - float(lo), float(hi) - float(y)) for x, y, lo, hi in zip(s.x, s.y, s.low, s.high)
           if _ok(x) and _ok(y) and _ok(lo) and _ok(hi)]
    return tuple(map(list, zip(*pts))) if pts else None


def _clean(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pts = [(float(x), float(y)) for x, y in zip(xs, ys) if _ok(x) and _ok(y)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _ok(v) -> bool:
    try:
        return v is not None and not math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def _finish(plt, fig, ax, axes: Axes, path: Path, caption: str) -> Figure:
    for y, label in axes.hlines:
        ax.axhline(y, color="grey", lw=0.8, ls=":", label=label or None)
    for x, label in axes.vlines:
        ax.axvline(x, color="grey", lw=0.8, ls="--", label=label or None)
    ax.set_xlabel(axes.xlabel)
    ax.set_ylabel(axes.ylabel)
    ax.set_title(axes.title, fontsize=10)
    if axes.logx:
        ax.set_xscale("log", base=2)
    if axes.logy:
        ax.set_yscale("log")
    if axes.integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    if axes.note:
        import textwrap

        ax.annotate("\n".join(textwrap.wrap(axes.note, 95)), (0, 0), xycoords="axes fraction", xytext=(0, -34),
                    textcoords="offset points", va="top", ha="left", fontsize=6.5, color="#a00")
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > LEGEND_INSIDE:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    elif handles:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Figure(path, caption)


def as_table(axes: Axes, caption: str, rows: list[tuple[str, float, float]]) -> Table:
    """What a plot of single points would show, as a table: one configuration is not a curve."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=["series", axes.xlabel, axes.ylabel])
    return Table(frame, f"{caption} (one point per series: a table instead of a plot)")


def lines(path: Path, series: list[Series], axes: Axes, caption: str) -> Figure | Table | None:
    series = [s for s in series if _clean(s.x, s.y)[0]]
    if not series or not ENABLED.get():
        return None
    if max(len(_clean(s.x, s.y)[0]) for s in series) < 2:
        return as_table(axes, caption, [(s.label, *(v[0] for v in _clean(s.x, s.y))) for s in series])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for s in series:
        xs, ys = _clean(s.x, s.y)
        line, = ax.plot(xs, ys, s.style, label=s.label, ms=4, lw=1.3, color=s.color)
        err = _errors(s)
        if err:
            ex, ey, below, above = err
            ax.errorbar(ex, ey, yerr=[below, above], fmt="none", ecolor=line.get_color(), elinewidth=0.9, capsize=3,
                        alpha=0.8)
    return _finish(plt, fig, ax, axes, path, caption)


def pareto(path: Path, groups: dict[str, tuple], axes: Axes, caption: str) -> Figure | None:
    """Scatter of (x, y) per group plus each group's upper-right frontier (higher is better on both).
    A group is (xs, ys, marker) or (xs, ys, marker, point labels), each label written next to its point."""
    groups = {k: v for k, v in groups.items() if _clean(v[0], v[1])[0]}
    if not groups or not ENABLED.get():
        return None
    if max(len(_clean(v[0], v[1])[0]) for v in groups.values()) < 2:
        return as_table(axes, caption, [(k, *(c[0] for c in _clean(v[0], v[1]))) for k, v in groups.items()])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label, (xs, ys, marker, *names) in groups.items():
        kept = [(float(x), float(y), n) for x, y, n in zip(xs, ys, names[0] if names else [""] * len(xs)) if _ok(x) and _ok(y)]
        xs, ys = [k[0] for k in kept], [k[1] for k in kept]
        line = ax.scatter(xs, ys, s=18, marker=marker, label=label, alpha=0.8)
        for x, y, name in kept:
            if name:
                ax.annotate(name, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6, color="#444")
        fx, fy = frontier(xs, ys)
        ax.plot(fx, fy, "-", lw=1.0, color=line.get_facecolor()[0])
    return _finish(plt, fig, ax, axes, path, caption)


def frontier(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """Points not dominated in (x, y), sorted by x (both maximised)."""
    pts = sorted(zip(xs, ys), key=lambda p: (-p[0], -p[1]))
    out, best_y = [], -math.inf
    for x, y in pts:
        if y > best_y:
            out.append((x, y))
            best_y = y
    out.sort()
    return [p[0] for p in out], [p[1] for p in out]


def bars(path: Path, categories: list[str], groups: dict[str, list[float]], axes: Axes, caption: str) -> Figure | None:
    """Grouped bars: one group of bars per category; NaN bars are left out and marked n/a."""
    if not ENABLED.get() or not categories or not groups or not any(_ok(v) for vals in groups.values() for v in vals):
        return None
    if sum(_ok(v) for vals in groups.values() for v in vals) < 2:
        return as_table(axes, caption, [(label, cat, v) for label, vals in groups.items() for cat, v in zip(categories, vals) if _ok(v)])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(categories) * max(1, len(groups)) ** 0.5), 4.0))
    width = 0.8 / len(groups)
    for i, (label, vals) in enumerate(groups.items()):
        xs = [j + (i - (len(groups) - 1) / 2) * width for j in range(len(categories))]
        ys = [v if _ok(v) else 0.0 for v in vals]
        bars_ = ax.bar(xs, ys, width=width, label=label)
        for x, v, b in zip(xs, vals, bars_):
            if not _ok(v):
                b.set_visible(False)
                ax.text(x, 0.02, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, transform=ax.get_xaxis_transform())
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=30, ha="right", fontsize=8)
    return _finish(plt, fig, ax, axes, path, caption)
