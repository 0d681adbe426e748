"""Results folder(s) -> report.md, report.html (self-contained), report.json and PNG plots."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from ..results.store import atomic_write_text, dumps
from . import (acceptance, attention_start, attention_tiles, context, draft_schedule, finetune, low_latency, mechanism,
               mechanism_table, over_time, render, steady_window, summary, synthetic_vs_real, under_load, verify_cost)
from . import plots as plot_helpers
from .common import Figure, Section
from ..results.load import ReportData, load
from .modelling import ModelContext, resolve


class ReportWriteError(Exception):
    """The report's folder cannot take files (a read-only results folder): one line, with the way out."""


def writable_out(out: Path) -> Path:
    """``out`` created and proven writable, else ``ReportWriteError`` saying so and that ``--out`` helps."""
    from ..results.runlock import probe_writable

    try:
        probe_writable(out)
    except OSError as exc:
        raise ReportWriteError(f"{out} is not writable ({exc.strerror or exc}); --out DIR writes the report "
                               "elsewhere") from exc
    return out


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    json: Path
    plots: tuple[Path, ...]


def sections(data: ReportData, ctx: ModelContext, out: Path) -> list[Section]:
    return [summary.build(data), acceptance.build(data, out), verify_cost.build(data, out), attention_start.build(data, ctx),
            attention_tiles.build(data, ctx, out), low_latency.build(data, out), mechanism.build(data, out),
            mechanism_table.build(data, out), finetune.build(data, out),
            under_load.build(data, out), steady_window.build(data, out), over_time.build(data, out),
            synthetic_vs_real.build(data, out),
            draft_schedule.build(data, out), context.build(data, out)]


def build_report(paths, out_dir, hardware: str | None = None, title: str = "speedbench report",
                 plots: bool = True) -> ReportFiles:
    """Render the report of ``paths`` (results folders) into ``out_dir``; ``plots=False`` skips the PNGs."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out = Path(out_dir)
    data = load(paths)  # a missing results folder fails here, before anything is created
    writable_out(out)
    ctx = resolve(data, hardware)
    with plot_helpers.enabled(plots):
        secs = sections(data, ctx, out)
    intro = [
        f"Generated {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')} from "
        + ", ".join(f"`{r}`" for r in data.roots) + " by `speedbench report` (it reads the results store only; "
        "nothing was run to make it).",
        f"Modelled numbers use {ctx.hw_note}.",
        "Sections G1..G5 read the cells against the guidelines and formulas of `docs/guidelines.md` "
        "(in the speedbench repository).",
    ]
    md = out / "report.md"
    atomic_write_text(md, render.markdown(title, intro, secs))
    page = out / "report.html"
    atomic_write_text(page, render.html_page(title, intro, secs))
    js = out / "report.json"
    atomic_write_text(js, dumps({s.key: s.values for s in secs}))
    pngs = tuple(b.path for s in secs for b in s.blocks if isinstance(b, Figure))
    return ReportFiles(md, page, js, pngs)
