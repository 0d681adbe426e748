"""Check a schedule against static D: at each load point, the schedule's speedup interval is compared
with that of the best static D there; the point is flagged only when the two intervals lie apart
(``evidence.differ``: a difference outside both intervals). A threshold collapse such as a schedule
switching K at the wrong batch size shows up as a point below. A point without a measured, finite
interval on either side gets no verdict (``n/a``, not flagged); a verdict on unstable cells says so.

The results folder holds both: cells that ran ``drafter.schedule`` (column ``schedule``) and the
static-D cells of the same drafter at the same load points (``method=none`` cells count as D=0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .. import evidence
from ..drafters.registry import is_baseline
from .pick import ScheduleError, load_column, load_of, measurement_rows, static_mask


@dataclass
class Point:
    schedule: str
    load: int
    context_bucket: str
    speedup: float  # the schedule's
    best_D: int
    best_speedup: float
    best_ci: tuple[float, float]
    verdict: str  # ok | below | above | n/a (no measured interval) | no static cells
    cells: list[str]  # the schedule cell, then the best static cell
    ci: tuple[float, float] = (math.nan, math.nan)  # the schedule's own interval
    unstable: str = ""  # evidence.unstable_note over the schedule cell and the best static cell

    @property
    def flagged(self) -> bool:
        return self.verdict in ("below", "above")


def check(cells: pd.DataFrame, drafter: str | None = None) -> list[Point]:
    """One ``Point`` per (schedule, load, context bucket) of the schedule cells in ``cells``."""
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
    col = load_column(sched)
    static = cells[static_mask(cells)]
    static = static[(static["drafter"] == name) | static["method"].map(is_baseline)]
    sched = sched.assign(**{col: load_of(sched, col)})
    static = static.assign(**{col: load_of(static, col)})
    out: list[Point] = []
    for (text, load, bucket), group in sched.groupby(["schedule", col, "context_bucket"], sort=True):
        row = group.iloc[0]
        s = float(row["speedup"])
        mine = evidence.row_interval(row)
        here = static[(static[col] == load) & (static["context_bucket"].astype(str) == str(bucket))]
        here = here[here.apply(lambda r: evidence.row_interval(r) is not None, axis=1)] if len(here) else here
        if here.empty:
            out.append(Point(str(text), int(load), str(bucket), s, -1, math.nan, (math.nan, math.nan),
                             "no static cells", [str(row["cell_id"])], mine or (math.nan, math.nan),
                             evidence.unstable_note([row])))
            continue
        best = here.loc[here["speedup"].astype(float).idxmax()]
        theirs = evidence.row_interval(best)
        out.append(Point(str(text), int(load), str(bucket), s, int(best["num_speculative_tokens"]),
                         float(best["speedup"]), theirs, evidence.differ(mine, theirs),
                         [str(row["cell_id"]), str(best["cell_id"])], mine or (math.nan, math.nan),
                         evidence.unstable_note([row, best])))
    return out


def check_folder(data, drafter: str | None = None, by_context: bool = False) -> list[Point]:
    """``check`` over the cells, or (``by_context``) over their live-context buckets (``schedule.by_context``)."""
    rows = measurement_rows(data)
    if by_context:
        from .by_context import context_rows

        rows = context_rows(rows)
        if rows.empty:
            raise ScheduleError("no cell has a per-context speedup (extra.by_context): nothing to verify by context")
        return sorted(check(rows, drafter), key=lambda p: (p.schedule, p.load, int(p.context_bucket)))
    return check(rows, drafter)
