"""From a sweep's cells to the best D per load value and vLLM's ``num_speculative_tokens_per_batch_size``.

Rules (docs/schedule.md):
  * the load axis is ``concurrency`` when the chosen drafter's cells have that column set, else
    ``batch_size``; a cell's load is what ran (``load_of``): its recorded concurrency (the
    in-flight bound the point could reach), or ``batch_size_run`` where the cell ran smaller
    batches than ``batch_size`` asked;
  * the cells are the derived overall rows (category=all) when the folder has them, else the
    measured cells; one cell per (load, context bucket, D) of one drafter, static D only;
  * a verdict needs a measured, finite interval (``speedbench.evidence``): a D without one is no
    candidate, and a load point where no D has one gets no K (``no verdict``: an undecided range);
    a schedule where no load point has one is an error;
  * a D *beats no speculation* when its speedup interval lies above 1 (``speedup_ci_low > 1``).
    The best is the highest speedup among those that do, and the K chosen is the smallest D whose
    interval overlaps the best's (a tie goes to the smaller D). K=0 only when every D's interval
    lies below 1 (speculation loses with confidence);
  * **undecided**: a point where no D beats no speculation but some D's interval reaches 1 (it
    straddles 1), or where a cell is unstable, gets no K, never K=0: ``undecided``, with the budget
    that would decide it from the point's own noise (``decide_budget``); ``decide_unstable=True``
    (``--decide-unstable``) decides it anyway by the rules above (a straddling point: K=0);
  * every choice names how many of the cells behind it were unstable, and shows the best measured
    D's speedup and interval (``best_D``) whatever the K;
  * measured load values L1 < L2 < ... become ranges [L_i, L_(i+1) - 1], the first from 1, the
    last to the largest measured load (``extrapolate=True``: to ``cap``, and the schedule says so);
    consecutive ranges with the same K (or both undecided) merge; several context buckets: a load
    value takes the smallest K over its buckets (undecided when one is) unless one is chosen;
  * a schedule with an undecided range is not deployable: ``deployable_ranges`` is None and the JSON's
    ``num_speculative_tokens_per_batch_size`` is null. vLLM fills a batch size outside every range with
    the K of the range below it (``vllm/v1/spec_decode/dynamic/utils.py``), so a file with the undecided
    ranges left out would still run a K there, undecided.
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
K0 = "every D's interval lies below 1"  # K=0: plain decoding; its speedup is the reference, not a measurement
K0_DECIDED = "no D's interval lies above 1 (decided by --decide-unstable)"
UNDECIDED = "undecided"  # a range's K where the point's evidence decides nothing (never K=0)


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
    # measured | K0 (every D's interval below 1) | undecided (straddles 1, or unstable) | no verdict (no interval)
    verdict: str = "measured"
    best_D: int = -1  # the point's best measured D (highest speedup with a measured interval); -1: none
    best_speedup: float = math.nan
    best_ci: tuple[float, float] = (math.nan, math.nan)
    why: str = ""  # undecided: why, and the budget that would decide it (``decide_budget``)
    decide_budget_s: float = math.nan  # the protocol.budget_s at which the point would decide (NaN: unknown)

    @property
    def decided(self) -> bool:
        return self.verdict not in (NO_VERDICT, UNDECIDED)

    @property
    def k_label(self) -> str:
        """K as a table shows it: the number, ``undecided``, or ``n/a`` (no measured interval)."""
        return str(self.D) if self.decided else UNDECIDED if self.verdict == UNDECIDED else "n/a"

    @property
    def shown(self) -> tuple[float, tuple[float, float], int]:
        """(speedup, interval, its D) as a table shows the row: the chosen K's, or for K=0 and undecided rows the
        best measured D's, so a row shows a number wherever one was measured (D -1: none was)."""
        if math.isfinite(self.speedup):
            return self.speedup, self.ci, self.D
        return self.best_speedup, self.best_ci, self.best_D

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
    extrapolate: bool = False  # the last range runs to ``cap`` (else it ends at the largest measured load)

    @property
    def measured_loads(self) -> list[int]:
        return sorted({c.load for c in self.table if c.decided})

    @property
    def undecided(self) -> list[list[int]]:
        """[start, end] of every range whose K is undecided."""
        return [[a, b] for a, b, k in self.ranges if k == UNDECIDED]

    @property
    def deployable_ranges(self) -> list[list[int]] | None:
        """The ranges for vLLM, or None while a range is undecided (the module docstring says why)."""
        return None if self.undecided else self.ranges

    @property
    def max_k(self) -> int:
        return max((r[2] for r in self.ranges if r[2] != UNDECIDED), default=0)

    @property
    def extrapolated(self) -> list[int] | None:
        """[first, last] load the ranges cover past the largest measured load (its K, not measured); None."""
        top = max((c.load for c in self.table), default=0)
        end = self.ranges[-1][1] if self.ranges else 0
        return [top + 1, end] if end > top else None

    @property
    def unstable_loads(self) -> list[int]:
        return sorted({c.load for c in self.table if c.decided and c.unstable})

    def notes(self) -> list[str]:
        """What the ranges rest on besides the measurements, one line each."""
        out = []
        top = max((c.load for c in self.table), default=0)
        if self.extrapolated:
            lo, hi = self.extrapolated
            out.append(f"loads {lo}..{hi} were not measured: they take the K of the largest measured load ({top}) "
                       "(--extrapolate)")
        elif self.ranges:
            out.append(f"the schedule ends at the largest measured load ({top}); vLLM runs the last range's K above it "
                       f"(it carries a range's K up to max_num_seqs): measure higher loads or cap max_num_seqs at {top}")
        if self.unstable_loads:
            out.append(f"K at load(s) {', '.join(map(str, self.unstable_loads))} rests on unstable cells")
        for c in self.table:
            if c.verdict == UNDECIDED:
                out.append(f"undecided at load {c.load}{'/' + c.context_bucket if c.context_bucket else ''}: {c.why}")
        skipped = sorted({c.load for c in self.table if c.verdict == NO_VERDICT})
        if skipped:
            out.append(f"no verdict at load(s) {', '.join(map(str, skipped))}: {evidence.NO_INTERVAL}")
        if self.undecided:
            spans = ", ".join(f"{a}..{b}" for a, b in self.undecided)
            out.append(f"not deployable: K undecided at loads {spans} (num_speculative_tokens_per_batch_size is null; "
                       "measure at the budget named, or --decide-unstable to decide from these cells as they are)")
        return out

    def to_json(self) -> dict:
        deploy = self.deployable_ranges
        return {
            "num_speculative_tokens_per_batch_size": deploy,
            "num_speculative_tokens": self.max_k if deploy is not None else None,
            "deployable": deploy is not None, "ranges": self.ranges, "undecided": self.undecided,
            "drafter": self.drafter, "load": self.load_column,
            "measured_loads": self.measured_loads, "extrapolated": self.extrapolated,
            "unstable_loads": self.unstable_loads, "notes": self.notes(),
            "table": [{"load": c.load, "context_bucket": c.context_bucket, "D": c.D if c.decided else None,
                       "K": c.D if c.decided else c.k_label,
                       "speedup": _num(c.speedup), "ci": [_num(c.ci[0]), _num(c.ci[1])], "cells": c.cells,
                       "best_D": c.best_D if c.best_D >= 0 else None, "best_speedup": _num(c.best_speedup),
                       "best_ci": [_num(c.best_ci[0]), _num(c.best_ci[1])], "verdict": c.verdict,
                       "why": c.why, "decide_budget_s": _num(c.decide_budget_s), "unstable": c.unstable}
                      for c in self.table],
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
    """(K, the chosen row or None for K=0) among one load point's static-D rows by the interval rules alone
    (no D above 1: K=0; whether the point decides is ``_choice``'s); (-1, None) when no row has a measured,
    finite interval (no verdict)."""
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


def _protocol(row) -> dict:
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    conf = extra.get("config") if isinstance(extra.get("config"), dict) else {}
    return conf.get("protocol") if isinstance(conf.get("protocol"), dict) else {}


def decide_budget(row, interval: bool = True) -> tuple[float, float, str]:
    """(factor, protocol.budget_s, words): how much more measurement would decide this row, from its own noise,
    assuming a half-width ~ 1 / sqrt(budget). Straddling 1: the factor at which its interval's half-width (log
    scale) reaches its distance to 1; unstable: at which its measurement noise (``speedup_noise``) reaches the
    protocol's target (only that with ``interval=False``: a row whose interval decides nothing here); both: the larger. The budget is the factor x the cell's own ``protocol.budget_s`` (NaN
    where the cell does not record it); the repeats scale alike (max_repeats must allow them)."""
    s, (lo, hi) = float(row["speedup"]), _ci(row)
    factors, parts = [], []
    if interval and lo <= 1.0 <= hi:
        half, dist = (math.log(hi) - math.log(lo)) / 2, abs(math.log(s)) if s > 0 else 0.0
        factors.append((half / dist) ** 2 if dist > 0 else math.inf)
        parts.append("its interval straddles 1")
    if not evidence.is_stable(row):
        proto = _protocol(row)
        noise, target = row.get("speedup_noise"), float(proto.get("target_rel_half_width", 0.02))
        noise = float(noise) if isinstance(noise, (int, float)) else math.nan
        if math.isfinite(noise) and noise <= target:  # unstable for another reason (contention, failures, ...)
            reason = str(row.get("unstable_reason") or "").split(";")[0] or "not stable"
            parts.append(f"its cell is unstable ({reason}): no budget fixes that, measure it again where nothing "
                         "competes for the machine")
        else:
            factors.append((noise / target) ** 2 if math.isfinite(noise) and target > 0 else math.nan)
            parts.append("its cell is unstable" + (f" (noise +-{noise:.1%}, target +-{target:.0%})"
                                                   if math.isfinite(noise) else " (no noise estimate)"))
    factor = math.nan if any(math.isnan(f) for f in factors) else max(factors, default=math.nan)
    budget = float(_protocol(row).get("budget_s", math.nan)) * factor
    reps = row.get("n_repeats")
    if factor == math.inf:
        how = "no budget decides it (its speedup is 1)"
    elif not factors:
        return math.nan, math.nan, " and ".join(parts)
    elif not math.isfinite(factor):
        how = "no noise estimate to size a budget from"
    elif math.isfinite(budget):
        more = f" protocol.max_repeats>={math.ceil(reps * factor)}" if isinstance(reps, (int, float)) and reps > 0 else ""
        how = f"about {factor:.1f}x the measurement would decide it: protocol.budget_s={budget:.0f}{more}"
    else:
        how = f"about {factor:.1f}x its measurement (budget and repeats) would decide it"
    return factor, budget, " and ".join(parts) + "; " + how + " (half-width ~ 1/sqrt(budget))"


def to_ranges(k_by_load: dict[int, int | str], cap: int = DEFAULT_CAP, extrapolate: bool = True) -> list[list]:
    """Measured load values -> inclusive [start, end, K] ranges from 1, equal K (or both ``undecided``) merged; the
    last ends at ``cap`` (``extrapolate``) or at the largest measured load."""
    loads = sorted(k_by_load)
    out: list[list] = []
    for i, load in enumerate(loads):
        start = 1 if i == 0 else load
        end = loads[i + 1] - 1 if i + 1 < len(loads) else (max(cap, load) if extrapolate else load)
        k = k_by_load[load]
        if out and out[-1][2] == k:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return out


def build(data, drafter: str | None = None, context_bucket: str | None = None, cap: int = DEFAULT_CAP,
          decide_unstable: bool = False, extrapolate: bool = False) -> Schedule:
    return build_rows(measurement_rows(data), drafter, context_bucket, cap, decide_unstable, extrapolate)


def build_rows(rows: pd.DataFrame, drafter: str | None = None, context_bucket: str | None = None,
               cap: int = DEFAULT_CAP, decide_unstable: bool = False, extrapolate: bool = False) -> Schedule:
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
    table = [_choice(int(load), str(bucket), group, decide_unstable)
             for (load, bucket), group in spec.groupby([col, "context_bucket"], sort=True)]
    chosen = [c for c in table if context_bucket is None or c.context_bucket == context_bucket]
    if not any(c.verdict != NO_VERDICT for c in chosen):
        raise ScheduleError(f"drafter {name!r}: no load point has a D with a measured, finite speedup interval "
                            "(a speedup needs TPOT: max_new_tokens >= 2; a load point needs two windows): no schedule")
    return Schedule(name, col, to_ranges(k_by_load(chosen, decide_unstable), cap, extrapolate), table, cap, extrapolate)


def k_by_load(table: list[Choice], decide_unstable: bool = False) -> dict[int, int | str]:
    """Each load's K over its context buckets: the smallest, ``undecided`` when one bucket's is. A load without a
    verdict (no measured interval) is undecided too; with ``decide_unstable`` it is left out (the K below covers it)."""
    out: dict[int, int | str] = {}
    for c in table:
        if c.verdict == UNDECIDED or (c.verdict == NO_VERDICT and not decide_unstable):
            out[c.load] = UNDECIDED
        elif c.decided and out.get(c.load) != UNDECIDED:
            out[c.load] = min(out.get(c.load, c.D), c.D)
    return out


def _choice(load: int, bucket: str, group: pd.DataFrame, decide_unstable: bool = False) -> Choice:
    k, row = choose(group)
    cand = {int(d): float(s) for d, s in zip(group["num_speculative_tokens"], group["speedup"])}
    every = list(map(str, group["cell_id"]))
    rows = [r for _, r in group.iterrows()]
    note = evidence.unstable_note(rows)
    measured = [r for r in rows if evidence.row_interval(r) is not None]
    if k < 0:
        return Choice(load, bucket, -1, math.nan, (math.nan, math.nan), every, cand, note, NO_VERDICT)
    best = max(measured, key=lambda r: float(r["speedup"]))
    shown = dict(best_D=int(best["num_speculative_tokens"]), best_speedup=float(best["speedup"]), best_ci=_ci(best))
    straddles = k == 0 and any(_ci(r)[1] >= 1.0 for r in measured)
    if (straddles or note) and not decide_unstable:  # the point decides nothing: never K=0, never a K
        # the row that needs the most measurement: the point decides only once every one of them would
        leads = ([best] if straddles else []) + [r for r in rows if not evidence.is_stable(r)]
        sized = [(decide_budget(r, interval=r is best and straddles), r) for r in leads]
        (_, budget, why), lead = max(sized, key=lambda x: x[0][0] if math.isfinite(x[0][0]) else math.inf)
        why = (f"D={int(lead['num_speculative_tokens'])} {float(lead['speedup']):.3g} "
               f"[{_ci(lead)[0]:.3g}, {_ci(lead)[1]:.3g}]: {why}")
        if straddles and lead is not best:
            why = f"D={int(best['num_speculative_tokens'])}'s interval {_ci(best)[0]:.3g}..{_ci(best)[1]:.3g} straddles 1; {why}"
        return Choice(load, bucket, -1, math.nan, (math.nan, math.nan), every, cand, note, UNDECIDED,
                      why=why, decide_budget_s=budget, **shown)
    if row is None:  # K=0: nothing measured for plain decoding itself (n/a, never "1 [1, 1]"); every cell is the evidence
        return Choice(load, bucket, 0, math.nan, (math.nan, math.nan), every, cand, note,
                      K0_DECIDED if straddles else K0, **shown)
    return Choice(load, bucket, k, float(row["speedup"]), _ci(row), [str(row["cell_id"])], cand, note, **shown)


def dumps(schedule: Schedule) -> str:
    return json.dumps(schedule.to_json(), indent=2)
