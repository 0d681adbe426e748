"""Check a schedule against static D: at each load point, the schedule's speedup must lie in the
interval of the best static D there; a point outside is flagged (a threshold collapse such as a
schedule switching K at the wrong batch size shows up as a point below the interval).

The results folder holds both: cells that ran ``drafter.schedule`` (column ``schedule``) and the
static-D cells of the same drafter at the same load points (``method=none`` cells count as D=0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..drafters.registry import is_baseline
from .pick import ScheduleError, _ci, load_column, measurement_rows, static_mask


@dataclass
class Point:
    schedule: str
    load: int
    context_bucket: str
    speedup: float  # the schedule's
    best_D: int
    best_speedup: float
    best_ci: tuple[float, float]
    verdict: str  # ok | below | above | no static cells
    cells: list[str]  # the schedule cell, then the best static cell

    @property
    def flagged(self) -> bool:
        return self.verdict != "ok"


def check(cells: pd.DataFrame, drafter: str | None = None) -> list[Point]:
    """One ``Point`` per (schedule, load, context bucket) of the schedule cells in ``cells``."""
    col = load_column(cells)
    static = cells[static_mask(cells)]
    sched = cells[~static_mask(cells)]
    if drafter is not None:
        sched = sched[sched["drafter"] == drafter]
    if sched.empty:
        raise ScheduleError("no cells ran a drafter.schedule in the results: run the schedule at every load point "
                            "first (docs/schedule.md)")
    names = sorted(set(sched["drafter"]))
    if len(names) > 1:
        raise ScheduleError(f"schedule cells of several drafters ({', '.join(names)}): pick one with --drafter NAME")
    name = names[0]
    static = static[(static["drafter"] == name) | static["method"].map(is_baseline)]
    out: list[Point] = []
    for (text, load, bucket), group in sched.groupby(["schedule", col, "context_bucket"], sort=True):
        row = group.iloc[0]
        s = float(row["speedup"])
        here = static[(static[col] == load) & (static["context_bucket"].astype(str) == str(bucket))]
        here = here[here["speedup"].map(lambda v: math.isfinite(float(v)))]
        if here.empty:
            out.append(Point(str(text), int(load), str(bucket), s, -1, math.nan, (math.nan, math.nan),
                             "no static cells", [str(row["cell_id"])]))
            continue
        best = here.loc[here["speedup"].astype(float).idxmax()]
        lo, hi = _ci(best)
        verdict = "ok" if lo <= s <= hi else ("below" if s < lo else "above")
        out.append(Point(str(text), int(load), str(bucket), s, int(best["num_speculative_tokens"]),
                         float(best["speedup"]), (lo, hi), verdict, [str(row["cell_id"]), str(best["cell_id"])]))
    return out


def check_folder(data, drafter: str | None = None) -> list[Point]:
    return check(measurement_rows(data), drafter)
