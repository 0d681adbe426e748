"""Draft length per load: per drafter, the best D at each load point (``speedbench schedule``'s rules)
and the vLLM schedule it gives; where cells ran a schedule, how it compares with the best static D."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from ..drafters.registry import is_baseline
from ..schedule.pick import ScheduleError, build as build_schedule, measurement_rows, static_mask
from ..schedule.verify import check
from . import plots
from .common import MEASURED, Section


def figure(rows: pd.DataFrame, name: str, col: str, out: Path):
    """Speedup vs load for every static D of ``name`` and every schedule it ran (measured)."""
    mine = rows[rows["drafter"] == name].sort_values(col)
    static = static_mask(mine)
    series = [plots.Series(f"D={d}", list(g[col]), list(g["speedup"]), "-o", color=f"C{i % 10}")
              for i, (d, g) in enumerate(mine[static].groupby("num_speculative_tokens"))]
    series += [plots.Series(f"schedule {text}", list(g[col]), list(g["speedup"]), "-s", color="k")
               for text, g in mine[~static].groupby("schedule")]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return plots.lines(out / f"schedule_{safe}.png", series, plots.Axes(
        col, "speedup (measured)", f"{name}: speedup per load, each static D and the schedule (measured)",
        logx=True, hlines=[(1.0, "no speculation")]), f"{name}: speedup vs {col}")


def build(data, out: Path) -> Section:
    sec = Section("schedule", "Draft length per load (the schedule to deploy)")
    rows = measurement_rows(data) if not data.cells.empty else pd.DataFrame()
    if rows.empty:
        sec.text("No finished cells.")
        return sec
    static = rows[static_mask(rows)]
    names = sorted(set(static.loc[~static["method"].map(is_baseline) & (static["num_speculative_tokens"] > 0), "drafter"]))
    sec.text("Per load point, K = the smallest D whose speedup interval overlaps that of the best D among those "
             "whose interval lies above 1; K=0 where none does. `speedbench schedule RESULTS --drafter NAME` writes "
             "the JSON for vLLM's `num_speculative_tokens_per_batch_size` (docs/schedule.md).")
    for name in names:
        try:
            sched = build_schedule(data, name)
        except ScheduleError as exc:
            sec.text(f"**{name}**: no schedule ({exc}).")
            continue
        frame = pd.DataFrame([{sched.load_column: c.load, "context bucket": c.context_bucket or "-", "K": c.D,
                               "speedup": c.speedup, "interval": f"[{c.ci[0]:.3g}, {c.ci[1]:.3g}]",
                               "cells": ", ".join(c.cells)} for c in sched.table])
        sec.text(f"**{name}** (load = {sched.load_column}): `num_speculative_tokens_per_batch_size` = "
                 f"`{json.dumps(sched.ranges)}`")
        sec.table(frame, kinds={"speedup": MEASURED})
        sec.figure(figure(rows, name, sched.load_column, out))
        sec.values[name] = sched.to_json()
    if not static_mask(rows).all():
        try:
            points = check(rows)
        except ScheduleError as exc:
            sec.text(f"Schedule cells: {exc}.")
            return sec
        frame = pd.DataFrame([{"load": p.load, "context bucket": p.context_bucket or "-", "schedule": p.schedule,
                               "speedup": p.speedup, "best static D": p.best_D, "best static": p.best_speedup,
                               "interval": f"[{p.best_ci[0]:.3g}, {p.best_ci[1]:.3g}]", "verdict": p.verdict}
                              for p in points])
        sec.text("### The schedule against static D\n\nA point outside the best static D's interval is flagged "
                 "(`below`: the schedule lost speed there, e.g. a collapse at a threshold).")
        sec.table(frame, kinds={"speedup": MEASURED, "best static": MEASURED})
        sec.values["verify"] = [{"load": p.load, "context_bucket": p.context_bucket, "verdict": p.verdict}
                                for p in points]
    return sec
