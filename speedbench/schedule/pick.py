"""From a sweep's cells to the best D per load value and vLLM's ``num_speculative_tokens_per_batch_size``.

Rules (docs/schedule.md):
  * the load axis is ``concurrency`` when the cells have that column set, else ``batch_size``;
  * the cells are the derived overall rows (category=all) when the folder has them, else the
    measured cells; one cell per (load, context bucket, D) of one drafter, static D only;
  * a D *beats no speculation* when its speedup interval lies above 1 (``speedup_ci_low > 1``);
    none does: K=0. Otherwise the best is the highest speedup among those that do, and the K
    chosen is the smallest D whose interval overlaps the best's (a tie goes to the smaller D);
  * a missing interval counts as the point itself;
  * measured load values L1 < L2 < ... become ranges [L_i, L_(i+1) - 1], the first from 1, the
    last to ``cap``; consecutive ranges with the same K merge; several context buckets: a load
    value takes the smallest K over its buckets unless one bucket is chosen.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from ..drafters.registry import is_baseline

DEFAULT_CAP = 4096  # the last range's end: past any max_num_seqs a deployment sets
LOAD_COLUMNS = ("concurrency", "batch_size")


class ScheduleError(ValueError):
    """The results cannot give one schedule (several drafters, no sweep, ...): one line."""


@dataclass
class Choice:
    load: int
    context_bucket: str
    D: int
    speedup: float
    ci: tuple[float, float]
    cells: list[str]
    candidates: dict[int, float] = field(default_factory=dict)  # D -> speedup (for the table)


@dataclass
class Schedule:
    drafter: str
    load_column: str
    ranges: list[list[int]]
    table: list[Choice]

    def to_json(self) -> dict:
        return {
            "num_speculative_tokens_per_batch_size": self.ranges,
            "num_speculative_tokens": max((r[2] for r in self.ranges), default=0),
            "drafter": self.drafter, "load": self.load_column,
            "table": [{"load": c.load, "context_bucket": c.context_bucket, "D": c.D, "speedup": _num(c.speedup),
                       "ci": [_num(c.ci[0]), _num(c.ci[1])], "cells": c.cells} for c in self.table],
        }


def _num(x: float):
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def load_column(cells: pd.DataFrame) -> str:
    """``concurrency`` where the cells have it set (load points of a server), else ``batch_size``."""
    if "concurrency" in cells:
        conc = pd.to_numeric(cells["concurrency"], errors="coerce")
        if bool((conc > 0).any()):
            return "concurrency"
    return "batch_size"


def static_mask(cells: pd.DataFrame) -> pd.Series:
    """Cells that ran a fixed D (no ``drafter.schedule``)."""
    if "schedule" not in cells:
        return pd.Series(True, index=cells.index)
    return cells["schedule"].fillna("").astype(str) == ""


def measurement_rows(data) -> pd.DataFrame:
    """The rows to choose from: derived overall rows when present, else measured category=all cells, else all."""
    rows = data.overall
    if rows.empty and not data.ok.empty:
        ok = data.ok
        rows = ok[ok["category"] == "all"] if bool((ok["category"] == "all").any()) else ok
    return rows


def pick_drafter(cells: pd.DataFrame, drafter: str | None) -> str:
    names = sorted(set(cells.loc[~cells["method"].map(is_baseline) & (cells["num_speculative_tokens"] > 0), "drafter"]))
    if drafter is not None:
        if drafter not in names:
            raise ScheduleError(f"--drafter {drafter!r}: not in the results (drafters: {', '.join(names) or 'none'})")
        return drafter
    if not names:
        raise ScheduleError("no speculative cells (D >= 1) in the results: nothing to schedule")
    if len(names) > 1:
        raise ScheduleError(f"several drafter configurations in the results ({', '.join(names)}): one schedule "
                            "is for one drafter; pick one with --drafter NAME")
    return names[0]


def _ci(row) -> tuple[float, float]:
    lo, hi, s = (float(row.get(k, math.nan)) for k in ("speedup_ci_low", "speedup_ci_high", "speedup"))
    return (lo if math.isfinite(lo) else s, hi if math.isfinite(hi) else s)


def choose(group: pd.DataFrame) -> tuple[int, pd.Series | None]:
    """(K, the chosen row or None for K=0) among one load point's static-D rows."""
    rows = [r for _, r in group.iterrows() if math.isfinite(float(r["speedup"]))]
    beats = [r for r in rows if _ci(r)[0] > 1.0]
    if not beats:
        return 0, None
    best = max(beats, key=lambda r: float(r["speedup"]))
    low = _ci(best)[0]
    tied = [r for r in beats if _ci(r)[1] >= low]
    pick = min(tied, key=lambda r: (int(r["num_speculative_tokens"]), -float(r["speedup"])))
    return int(pick["num_speculative_tokens"]), pick


def to_ranges(k_by_load: dict[int, int], cap: int = DEFAULT_CAP) -> list[list[int]]:
    """Measured load values -> inclusive [start, end, K] ranges from 1 to ``cap``, equal K merged."""
    loads = sorted(k_by_load)
    out: list[list[int]] = []
    for i, load in enumerate(loads):
        start = 1 if i == 0 else load
        end = loads[i + 1] - 1 if i + 1 < len(loads) else max(cap, load)
        k = k_by_load[load]
        if out and out[-1][2] == k:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return out


def build(data, drafter: str | None = None, context_bucket: str | None = None, cap: int = DEFAULT_CAP) -> Schedule:
    rows = measurement_rows(data)
    if rows.empty:
        raise ScheduleError("no finished cells in the results")
    rows = rows[static_mask(rows)]
    name = pick_drafter(rows, drafter)
    col = load_column(rows)
    spec = rows[(rows["drafter"] == name) & (rows["num_speculative_tokens"] > 0)]
    spec = spec[pd.to_numeric(spec[col], errors="coerce") > 0]
    buckets = sorted(set(spec["context_bucket"].astype(str)))
    if context_bucket is not None and context_bucket not in buckets:
        raise ScheduleError(f"--context-bucket {context_bucket!r}: not in the results (buckets: {', '.join(buckets)})")
    dup = spec.groupby([col, "context_bucket", "num_speculative_tokens"]).size()
    if bool((dup > 1).any()):
        (load, bucket, d) = dup[dup > 1].index[0]
        raise ScheduleError(f"several cells for {col}={load}, context_bucket={bucket}, D={d} of drafter {name!r} "
                            "(other settings vary: target, backend, sampling or dataset?): give a folder of one sweep")
    table: list[Choice] = []
    for (load, bucket), group in spec.groupby([col, "context_bucket"], sort=True):
        k, row = choose(group)
        cand = {int(d): float(s) for d, s in zip(group["num_speculative_tokens"], group["speedup"])}
        if row is None:
            table.append(Choice(int(load), str(bucket), 0, 1.0, (1.0, 1.0), list(map(str, group["cell_id"])), cand))
        else:
            table.append(Choice(int(load), str(bucket), k, float(row["speedup"]), _ci(row), [str(row["cell_id"])], cand))
    k_by_load: dict[int, int] = {}
    for c in table:
        if context_bucket is None or c.context_bucket == context_bucket:
            k_by_load[c.load] = min(k_by_load.get(c.load, c.D), c.D)
    return Schedule(name, col, to_ranges(k_by_load, cap), table)


def dumps(schedule: Schedule) -> str:
    return json.dumps(schedule.to_json(), indent=2)
