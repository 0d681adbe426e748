"""The best D over load x live context, and one schedule per context bucket (``speedbench schedule --by context``).

A cell's ``extra.by_context`` (``metrics.buckets``) holds, per live-context bucket (named by its lower
edge, tokens), the speedup of that bucket's steps over the baseline's steps in the same bucket with
its bootstrap interval. Each bucket row becomes one measurement row (``context_bucket`` = the edge),
and ``pick``'s rules choose K per (load, bucket). vLLM's ``num_speculative_tokens_per_batch_size``
takes the batch size alone: the result is one batch schedule per bucket (deploy the one of the
context the service sees) and, for the reference engine, the (batch, context) schedule of them all
(``engine.schedule``: bucket i covers contexts from its edge to the next bucket's edge - 1, the first
from 0, the last open). A bucket where no load point has a verdict gets no schedule (a note says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .pick import DEFAULT_CAP, NO_VERDICT, UNDECIDED, Schedule, ScheduleError, build_rows, k_by_load, measurement_rows, to_ranges

CONTEXT_END = 1 << 30  # the last context range's end (tokens; a longer context keeps its K)
KEEP = ("cell_id", "drafter", "method", "num_speculative_tokens", "batch_size", "batch_size_run", "concurrency",
        "schedule", "stable", "unstable_reason", "status", "category", "derived")


def context_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, live-context bucket) with the bucket's paired speedup and interval."""
    out = []
    for _, cell in rows.iterrows():
        extra = cell.get("extra") if isinstance(cell.get("extra"), dict) else {}
        for b in extra.get("by_context") or ():
            if "speedup" not in b:
                continue  # written before buckets carried a paired speedup
            out.append({**{k: cell[k] for k in KEEP if k in cell.index}, "context_bucket": str(b["bucket"]),
                        "context_edge": int(b["bucket"]), "al": _nan(b.get("al")), "speedup": _nan(b.get("speedup")),
                        "speedup_ci_low": _nan(b.get("speedup_ci_low")),
                        "speedup_ci_high": _nan(b.get("speedup_ci_high")), "steps": b.get("steps")})
    return pd.DataFrame(out)


def _nan(v) -> float:
    return math.nan if v is None else float(v)


@dataclass
class ContextSchedule:
    base: Schedule  # the table over (load, bucket); its ranges are the smallest K over buckets
    per_bucket: dict[int, list[list]] = field(default_factory=dict)  # edge -> vLLM batch ranges (K may be undecided)
    skipped: list[int] = field(default_factory=list)  # buckets with no verdict at any load

    @property
    def deployable(self) -> dict[int, list[list[int]]]:
        """The buckets whose batch schedule has no undecided range (``pick``: never deploy an undecided K)."""
        return {e: r for e, r in self.per_bucket.items() if not any(k == UNDECIDED for _, _, k in r)}

    @property
    def plan(self) -> list[list] | None:
        """The reference engine's (batch, context) schedule: [ctx_start, ctx_end, ranges] per bucket; None while a
        bucket's schedule holds an undecided range."""
        if not self.per_bucket or len(self.deployable) < len(self.per_bucket):
            return None
        edges = sorted(self.per_bucket)
        ends = [e - 1 for e in edges[1:]] + [max(CONTEXT_END, edges[-1])]
        return [[0 if i == 0 else e, end, self.per_bucket[e]] for i, (e, end) in enumerate(zip(edges, ends))]

    def notes(self) -> list[str]:
        out = list(self.base.notes())
        if self.skipped:
            out.append(f"no schedule for context bucket(s) {', '.join(map(str, self.skipped))}: no load point "
                       "there has a D with a measured interval")
        held = sorted(set(self.per_bucket) - set(self.deployable))
        if held:
            out.append(f"not deployable for context bucket(s) {', '.join(map(str, held))}: K undecided at some load "
                       "(their vLLM schedule is left out, and so is the reference engine's (batch, context) plan)")
        return out

    def to_json(self) -> dict:
        js = self.base.to_json()
        return {**js, "by": "batch,context",
                "num_speculative_tokens_per_batch_size_by_context": {str(k): v for k, v in self.deployable.items()},
                "ranges_by_context": {str(k): v for k, v in self.per_bucket.items()},
                "schedule_by_context": self.plan, "skipped_buckets": self.skipped, "notes": self.notes()}


def build(data, drafter: str | None = None, cap: int = DEFAULT_CAP, decide_unstable: bool = False,
          extrapolate: bool = False) -> ContextSchedule:
    rows = context_rows(measurement_rows(data))
    if rows.empty:
        raise ScheduleError("no cell has a per-context speedup (extra.by_context with a baseline pairing): "
                            "--by context needs cells from this version of speedbench on an engine that records "
                            "each step's context")
    base = build_rows(rows, drafter, None, cap, decide_unstable, extrapolate)
    base.table.sort(key=lambda c: (c.load, int(c.context_bucket)))  # buckets in token order, not as text
    sched = ContextSchedule(base)
    for edge in sorted({int(c.context_bucket) for c in base.table}):
        mine = [c for c in base.table if int(c.context_bucket) == edge]
        if all(c.verdict == NO_VERDICT for c in mine):
            sched.skipped.append(edge)
        else:
            sched.per_bucket[edge] = to_ranges(k_by_load(mine, decide_unstable), cap, extrapolate)
    return sched
