"""Draft length per load: per drafter, the best D at each load point (``speedbench schedule``'s rules)
and the vLLM schedule it gives; where cells ran a schedule, how it compares with the best static D."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from ..schedule.pick import (ScheduleError, build as build_schedule, load_of, measurement_rows, speculative_drafters,
                             static_mask)
from ..schedule.verify import check
from . import plots
from .common import MEASURED, Section


def figure(rows: pd.DataFrame, name: str, col: str, out: Path):
    """Speedup vs load for every static D of ``name`` and every schedule it ran (measured)."""
    mine = rows[rows["drafter"] == name]
    mine = mine.assign(**{col: load_of(mine, col)}).sort_values(col)  # the load each cell ran at
    static = static_mask(mine)
    series = [plots.Series(f"D={d}", list(g[col]), list(g["speedup"]), "-o", color=f"C{i % 10}", **_interval(g))
              for i, (d, g) in enumerate(mine[static].groupby("num_speculative_tokens"))]
    series += [plots.Series(f"schedule {text}", list(g[col]), list(g["speedup"]), "-s", color="k", **_interval(g))
               for text, g in mine[~static].groupby("schedule")]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return plots.lines(out / f"schedule_{safe}.png", series, plots.Axes(
        col, "speedup (measured)", f"{name}: speedup per load, each static D and the schedule (measured)",
        logx=True, hlines=[(1.0, "no speculation")]), f"{name}: speedup vs {col} (bars: each point's 95% interval)")


def _interval(rows: pd.DataFrame) -> dict:
    """A series' error bars: each row's speedup interval (none where the rows carry none)."""
    if not {"speedup_ci_low", "speedup_ci_high"} <= set(rows.columns):
        return {}
    return {"low": list(rows["speedup_ci_low"]), "high": list(rows["speedup_ci_high"])}


def _iv(ci) -> str:
    return f"[{ci[0]:.3g}, {ci[1]:.3g}]" if all(map(math.isfinite, ci)) else "n/a"


def build(data, out: Path) -> Section:
    sec = Section("schedule", "Draft length per load (the schedule to deploy)")
    rows = measurement_rows(data) if not data.cells.empty else pd.DataFrame()
    if rows.empty:
        sec.text("No finished cells.")
        return sec
    static = rows[static_mask(rows)]
    names = speculative_drafters(static)
    sec.text("Per load point, K = the smallest D whose speedup interval overlaps that of the best D among those "
             "whose interval lies above 1; K=0 where none does. `speedbench schedule RESULTS --drafter NAME` writes "
             "the JSON for vLLM's `num_speculative_tokens_per_batch_size` (docs/schedule.md).")
    for name in names:
        try:
            sched = build_schedule(data, name)
        except ScheduleError as exc:
            sec.text(f"**{name}**: no schedule ({exc}).")
            continue
        frame = pd.DataFrame([{sched.load_column: c.load, "context bucket": c.context_bucket or "-",
                               "K": c.k_label, "speedup": c.shown[0], "of D": c.shown[2], "interval": _iv(c.shown[1]),
                               "evidence": c.evidence,
                               "cells": ", ".join(c.cells)} for c in sched.table])
        sec.text(f"**{name}** (load = {sched.load_column}, as each cell ran): `num_speculative_tokens_per_batch_size` = "
                 f"`{json.dumps(sched.ranges)}`" + "".join(f"; {n}" for n in sched.notes()))
        sec.table(frame, kinds={"speedup": MEASURED, "interval": MEASURED})
        sec.figure(figure(rows, name, sched.load_column, out))
        sec.values[name] = sched.to_json()
    if not static_mask(rows).all():
        try:
            points = check(rows)
        except ScheduleError as exc:
            sec.text(f"Schedule cells: {exc}.")
            return sec
        frame = pd.DataFrame([{"load": p.load, "context bucket": p.context_bucket or "-", "schedule": p.schedule,
                               "speedup": p.speedup, "interval": _iv(p.ci), "best static D": p.best_D,
                               "best static": p.best_speedup, "best interval": _iv(p.best_ci),
                               "verdict": p.verdict + (f" ({p.unstable})" if p.unstable else "")}
                              for p in points])
        sec.text("### The schedule against static D\n\nA point is flagged only when the schedule's interval and the "
                 "best static D's lie apart (`below`: the schedule lost speed there, e.g. a collapse at a threshold); "
                 "`n/a` where either has no measured interval; a verdict on unstable cells says so.")
        sec.table(frame, kinds={"speedup": MEASURED, "best static": MEASURED})
        sec.values["verify"] = [{"load": p.load, "context_bucket": p.context_bucket, "verdict": p.verdict,
                                 "unstable": p.unstable}
                                for p in points]
    return sec
