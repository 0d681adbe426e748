"""From a sweep's cells to the best D per load value and vLLM's ``num_speculative_tokens_per_batch_size``.

Rules (docs/schedule.md):
  * the load axis is ``concurrency`` when the chosen drafter's cells have that column set, else
    ``batch_size``; a cell's load is what ran (``load_of``): its recorded concurrency (the
    in-flight bound the point could reach), or ``batch_size_run`` where the cell ran smaller
    batches than ``batch_size`` asked;
  * the cells are the derived overall rows (category=all) when the folder has them, else the
    measured cells; one cell per (load, context bucket, D) of one drafter, static D only;
  * a verdict needs a measured, finite interval (``speedbench.evidence``): a D without one is no
    candidate, and a load point where no D has one gets no K (listed as ``no verdict``, left out of
    the ranges); a schedule with no load point left is an error;
  * a D *beats no speculation* when its speedup interval lies above 1 (``speedup_ci_low > 1``);
    none does: K=0. Otherwise the best is the highest speedup among those that do, and the K
    chosen is the smallest D whose interval overlaps the best's (a tie goes to the smaller D);
  * every choice names how many of the cells behind it were unstable;
  * measured load values L1 < L2 < ... become ranges [L_i, L_(i+1) - 1], the first from 1, the
    last to ``cap``; consecutive ranges with the same K merge; the part past the largest measured
    load is extrapolated and the schedule says so (``extrapolated``); several context buckets: a
    load value takes the smallest K over its buckets unless one bucket is chosen.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from .. import evidence
from ..drafters.registry import is_baseline

DEFAULT_CAP = 4096  # the last range's end: past any max_num_seqs a deployment sets
LOAD_COLUMNS = ("concurrency", "batch_size")


NO_VERDICT = "no verdict"
K0 = "no D's interval lies above 1"  # K=0: plain decoding; its speedup is the reference, not a measurement


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
    unstable: str = ""  # evidence.unstable_note over the cells the choice compared ("" = all stable)
    verdict: str = "measured"  # measured | K0 (no D's interval above 1) | no verdict (no D with a measured interval)

    @property
    def decided(self) -> bool:
        return self.verdict != NO_VERDICT

    @property
    def evidence(self) -> str:
        """What the choice rests on, in words: its verdict when not a plain measurement, and unstable cells."""
        return "; ".join(x for x in (self.verdict if self.verdict != "measured" else "", self.unstable) if x) or "stable"


@dataclass
class Schedule:
    drafter: str
    load_column: str
    ranges: list[list[int]]
    table: list[Choice]
    cap: int = DEFAULT_CAP

    @property
    def measured_loads(self) -> list[int]:
        return sorted({c.load for c in self.table if c.decided})

    @property
    def extrapolated(self) -> list[int] | None:
        """[first, last] load the ranges cover past the largest measured load (its K, not measured); None."""
        top = max(self.measured_loads, default=0)
        end = self.ranges[-1][1] if self.ranges else 0
        return [top + 1, end] if end > top else None

    @property
    def unstable_loads(self) -> list[int]:
        return sorted({c.load for c in self.table if c.decided and c.unstable})

    def notes(self) -> list[str]:
        """What the ranges rest on besides the measurements, one line each."""
        out = []
        if self.extrapolated:
            lo, hi = self.extrapolated
            out.append(f"loads {lo}..{hi} were not measured: they take the K of the largest measured load "
                       f"({max(self.measured_loads)})")
        if self.unstable_loads:
            out.append(f"K at load(s) {', '.join(map(str, self.unstable_loads))} rests on unstable cells")
        skipped = sorted({c.load for c in self.table if not c.decided})
        if skipped:
            out.append(f"no verdict at load(s) {', '.join(map(str, skipped))}: {evidence.NO_INTERVAL}")
        return out

    def to_json(self) -> dict:
        return {
            "num_speculative_tokens_per_batch_size": self.ranges,
            "num_speculative_tokens": max((r[2] for r in self.ranges), default=0),
            "drafter": self.drafter, "load": self.load_column,
            "measured_loads": self.measured_loads, "extrapolated": self.extrapolated,
            "unstable_loads": self.unstable_loads, "notes": self.notes(),
            "table": [{"load": c.load, "context_bucket": c.context_bucket, "D": c.D if c.decided else None,
                       "speedup": _num(c.speedup), "ci": [_num(c.ci[0]), _num(c.ci[1])], "cells": c.cells,
                       "verdict": c.verdict, "unstable": c.unstable} for c in self.table],
        }


def _num(x: float):
    return None if x is None or not math.isfinite(float(x)) else round(float(x), 4)


def load_column(cells: pd.DataFrame) -> str:
    """``concurrency`` where the cells have it set (load points), else ``batch_size``."""
    if "concurrency" in cells:
        conc = pd.to_numeric(cells["concurrency"], errors="coerce")
        if bool((conc > 0).any()):
            return "concurrency"
    return "batch_size"


def load_of(cells: pd.DataFrame, col: str) -> pd.Series:
    """The load each row ran at on axis ``col``: ``concurrency`` as recorded (the in-flight bound the
    point reached), ``batch_size`` lowered to ``batch_size_run`` where the cell ran smaller batches."""
    load = pd.to_numeric(cells[col], errors="coerce")
    if col == "batch_size" and "batch_size_run" in cells:
        ran = pd.to_numeric(cells["batch_size_run"], errors="coerce")
        load = load.where(~((ran > 0) & (ran < load)), ran)
    return load


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


def speculative_drafters(cells: pd.DataFrame) -> list[str]:
    """The drafter configurations of the speculative cells (D >= 1), sorted: what a schedule is built for."""
    return sorted(set(cells.loc[~cells["method"].map(is_baseline) & (cells["num_speculative_tokens"] > 0), "drafter"]))


def pick_drafter(cells: pd.DataFrame, drafter: str | None) -> str:
    names = speculative_drafters(cells)
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
    """The row's measured interval, or (nan, nan) (``evidence.row_interval``: no verdict without one)."""
    return evidence.row_interval(row) or (math.nan, math.nan)


def choose(group: pd.DataFrame) -> tuple[int, pd.Series | None]:
    """(K, the chosen row or None for K=0) among one load point's static-D rows; (-1, None) when no
    row has a measured, finite interval (no verdict)."""
    rows = [r for _, r in group.iterrows() if evidence.row_interval(r) is not None]
    if not rows:
        return -1, None
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
    return build_rows(measurement_rows(data), drafter, context_bucket, cap)


def build_rows(rows: pd.DataFrame, drafter: str | None = None, context_bucket: str | None = None,
               cap: int = DEFAULT_CAP) -> Schedule:
    """``build`` over given measurement rows (``schedule.by_context`` gives one row per live-context bucket)."""
    if rows.empty:
        raise ScheduleError("no finished cells in the results")
    rows = rows[static_mask(rows)]
    name = pick_drafter(rows, drafter)
    mine = rows[(rows["drafter"] == name) & (rows["num_speculative_tokens"] > 0)]
    col = load_column(mine)  # the load axis of this drafter's cells, not of every cell in the folder
    spec = mine.assign(**{col: load_of(mine, col)})
    spec = spec[spec[col] > 0]
    if spec.empty:
        raise ScheduleError(f"drafter {name!r}: no cell with a {col} >= 1: nothing to schedule")
    buckets = sorted(set(spec["context_bucket"].astype(str)))
    if context_bucket is not None and context_bucket not in buckets:
        raise ScheduleError(f"--context-bucket {context_bucket!r}: not in the results (buckets: {', '.join(buckets)})")
    dup = spec.groupby([col, "context_bucket", "num_speculative_tokens"]).size()
    if bool((dup > 1).any()):
        (load, bucket, d) = dup[dup > 1].index[0]
        raise ScheduleError(f"several cells for {col}={load}, context_bucket={bucket}, D={d} of drafter {name!r} "
                            "(other settings vary: target, backend, sampling or dataset, or load points that ran "
                            "at the same load?): give a folder of one sweep")
    table = [_choice(int(load), str(bucket), group) for (load, bucket), group in spec.groupby([col, "context_bucket"], sort=True)]
    k_by_load: dict[int, int] = {}
    for c in table:
        if c.decided and (context_bucket is None or c.context_bucket == context_bucket):
            k_by_load[c.load] = min(k_by_load.get(c.load, c.D), c.D)
    if not k_by_load:
        raise ScheduleError(f"drafter {name!r}: no load point has a D with a measured, finite speedup interval "
                            "(a speedup needs TPOT: max_new_tokens >= 2): no schedule")
    return Schedule(name, col, to_ranges(k_by_load, cap), table, cap)


def _choice(load: int, bucket: str, group: pd.DataFrame) -> Choice:
    k, row = choose(group)
    cand = {int(d): float(s) for d, s in zip(group["num_speculative_tokens"], group["speedup"])}
    every = list(map(str, group["cell_id"]))
    note = evidence.unstable_note(r for _, r in group.iterrows())
    if k < 0:
        return Choice(load, bucket, -1, math.nan, (math.nan, math.nan), every, cand, note, NO_VERDICT)
    if row is None:  # K=0: nothing measured for plain decoding itself (n/a, never "1 [1, 1]"); every cell is the evidence
        return Choice(load, bucket, 0, math.nan, (math.nan, math.nan), every, cand, note, K0)
    return Choice(load, bucket, k, float(row["speedup"]), _ci(row), [str(row["cell_id"])], cand, note)


def dumps(schedule: Schedule) -> str:
    return json.dumps(schedule.to_json(), indent=2)
