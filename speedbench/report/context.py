"""Speculation against context: acceptance, cost and speedup by the live context each step saw.

Reads each cell's ``extra.by_context`` (``metrics.buckets``: per live-context bucket, named by its
lower edge in tokens) and, for agentic runs, ``extra.by_turn`` (``metrics.trajectory``). Table columns:
``context`` (bucket lower edge, tokens), ``steps``, ``AL``, ``draft ms`` / ``verify ms`` / ``step ms``
(mean per target iteration in the bucket), ``speedup`` (the bucket's baseline ms per token over the
speculative ms per token, both from that bucket's steps) and ``interval`` (percentile bootstrap over
the bucket's target iterations, 95%).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ..drafters.registry import is_baseline
from ..schedule.by_context import build as build_by_context, context_rows
from ..schedule.pick import ScheduleError, speculative_drafters, measurement_rows
from . import plots
from .common import MEASURED, Section, point_text

TIERS = ("low_entropy", "mixed", "high_entropy")


def _iv(lo, hi) -> str:
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi))
    return f"[{lo:.3g}, {hi:.3g}]" if ok else "n/a"


def bucket_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, live-context bucket) of the speculative cells, with the columns the module names."""
    rows = []
    for _, cell in cells.iterrows():
        extra = cell.get("extra") if isinstance(cell.get("extra"), dict) else {}
        if is_baseline(cell.get("method", "none")) or not extra.get("by_context"):
            continue
        for b in extra["by_context"]:
            rows.append({"drafter": cell["drafter"], "D": int(cell["num_speculative_tokens"]),
                         "B": int(cell["batch_size"]), **_load_point(cell), "dataset": cell.get("dataset", ""),
                         "category": cell.get("category", ""), "schedule": cell.get("schedule") or "",
                         "context": int(b["bucket"]), "steps": b.get("steps"), "AL": _f(b.get("al")),
                         "draft ms": _f(b.get("t_draft_ms")), "verify ms": _f(b.get("t_verify_ms")),
                         "step ms": _f(b.get("t_step_ms")), "speedup": _f(b.get("speedup")),
                         "interval": _iv(_f(b.get("speedup_ci_low")), _f(b.get("speedup_ci_high"))),
                         "low": _f(b.get("speedup_ci_low")), "high": _f(b.get("speedup_ci_high"))})
    frame = pd.DataFrame(rows)
    if not frame.empty:  # a degenerate bootstrap can miss its point by a rounding error: the bars need low <= y <= high
        frame["low"] = frame[["low", "speedup"]].min(axis=1, skipna=False)
        frame["high"] = frame[["high", "speedup"]].max(axis=1, skipna=False)
    return frame


def _f(v) -> float:
    return math.nan if v is None else float(v)


def _load_point(cell) -> dict:
    """The cell's load point (``concurrency``, ``request_rate``; unset: -1, inf): every row carries it, so rows of
    different load points never look identical (``Section.table`` leaves out a column no row sets)."""
    conc = pd.to_numeric(cell.get("concurrency", -1), errors="coerce")
    rate = pd.to_numeric(cell.get("request_rate", math.inf), errors="coerce")
    return {"concurrency": int(conc) if math.isfinite(conc) else -1,
            "request_rate": float(rate) if not math.isnan(rate) else math.inf}


def _point(part: pd.DataFrame, b) -> str:
    """A curve group's title: its load point (``C=4``, ``rate=2/s``) where it has one, else ``B=<b>``."""
    row = part.iloc[0]
    return point_text(["concurrency", "request_rate"], (row["concurrency"], row["request_rate"], b)).replace(" = ", "=")


def _curves(sec: Section, frame: pd.DataFrame, out: Path) -> None:
    for (b, _, _), part in frame[frame["schedule"] == ""].groupby(["B", "concurrency", "request_rate"]):
        where = _point(part, b)
        many = part["dataset"].nunique() > 1  # random and real prompts (or several splits): a curve each
        series = [plots.Series(f"{name} D={d}" + (f" {ds}" if many else ""), list(g["context"]), list(g["speedup"]),
                               "-o", color=f"C{i % 10}", low=list(g["low"]), high=list(g["high"]))
                  for i, ((name, d, ds), g) in enumerate(part.sort_values("context").groupby(["drafter", "D", "dataset"]))]
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"B{b}" if where.startswith("B=") else where)
        sec.figure(plots.lines(out / f"context_speedup_{safe}.png", series, plots.Axes(
            "live context (bucket lower edge, tokens)", "speedup (measured, per bucket)",
            f"{where}: speedup against live context, per drafter and D", logx=True, hlines=[(1.0, "no speculation")]),
            f"{where}: speedup vs live context (bars: each bucket's bootstrap interval)"))


def _best_d(sec: Section, data) -> None:
    rows = measurement_rows(data)
    names = speculative_drafters(rows)
    for name in names:
        try:
            sched = build_by_context(data, name)
        except ScheduleError as exc:
            sec.text(f"**{name}**: no best D per context bucket ({exc}).")
            continue
        table = pd.DataFrame([{sched.base.load_column: c.load, "context": int(c.context_bucket),
                               "best D": c.k_label, "speedup": c.shown[0], "of D": c.shown[2],
                               "interval": _iv(*c.shown[1]), "evidence": c.evidence} for c in sched.base.table])
        table = table.sort_values([sched.base.load_column, "context"])
        sec.table(table, f"{name}: the best D per load and live-context bucket (the rules of `speedbench schedule "
                         "RESULTS --by context`: the smallest D whose interval overlaps the best's among those "
                         "above 1; 0: none).",
                  {"speedup": MEASURED})
        sec.text(_changes(name, sched))
        sec.values.setdefault("best_d", {})[name] = sched.to_json()


def _changes(name: str, sched) -> str:
    """Where D should change with the context, per load, in words."""
    lines = []
    by_load: dict[int, list] = {}
    for c in sched.base.table:
        if c.decided:
            by_load.setdefault(c.load, []).append((int(c.context_bucket), c.D))
    for load, pts in sorted(by_load.items()):
        pts.sort()
        moves = [f"{a[1]} -> {b[1]} at {b[0]} tokens" for a, b in zip(pts, pts[1:]) if a[1] != b[1]]
        lines.append(f"{sched.base.load_column}={load}: " + ("; ".join(moves) if moves else
                                                             f"K={pts[0][1]} at every measured context"))
    return f"**{name}**, where D should change with the live context: " + (" | ".join(lines) or "no verdict") + "."


def _contrast(sec: Section, frame: pd.DataFrame) -> None:
    """Random vs real prompts and the entropy tiers at each context bucket (where the results hold both)."""
    kinds = frame.assign(prompts=frame.apply(
        lambda r: "random" if str(r["dataset"]).startswith("random") else
        (r["category"] if r["category"] in TIERS else "real"), axis=1))
    kinds = kinds[kinds["category"] != "all"] if (kinds["category"] != "all").any() else kinds
    if kinds["prompts"].nunique() < 2:
        sec.text("Random against real prompts, entropy tiers: one kind of prompt in these results (n/a).")
        return
    pivot = kinds.pivot_table(index=["drafter", "D", "B", "concurrency", "request_rate", "context"], columns="prompts",
                              values=["AL", "speedup"], aggfunc="mean")
    pivot.columns = [f"{v} {k}" for v, k in pivot.columns]
    sec.table(pivot.reset_index(), "AL and speedup per live-context bucket by kind of prompt (random token ids, "
                                   "the entropy tiers, other real prompts): the gap is what real text buys at "
                                   "each length.", {c: MEASURED for c in pivot.columns})
    sec.values["contrast"] = pivot.reset_index().to_dict("records")


def _turns(sec: Section, cells: pd.DataFrame) -> None:
    rows = []
    for _, cell in cells.iterrows():
        extra = cell.get("extra") if isinstance(cell.get("extra"), dict) else {}
        for t in extra.get("by_turn") or ():
            rows.append({"drafter": cell["drafter"], "D": int(cell["num_speculative_tokens"]), "B": int(cell["batch_size"]),
                         **_load_point(cell), "turn": t["turn"], "n": t["n"],
                         "context tokens": round(t["context_tokens"]), "AL": _f(t["al"]),
                         "speedup": _f(t["speedup"]), "interval": _iv(_f(t["speedup_ci_low"]), _f(t["speedup_ci_high"]))})
    if rows:
        table = pd.DataFrame(rows).sort_values(["drafter", "D", "B", "concurrency", "request_rate", "turn"])
        sec.table(table, "Agentic trajectories: AL and speedup per turn (the cut before assistant turn k) with the "
                         "context at that turn; speedup = geometric mean of paired TPOT ratios, interval = percentile "
                         "bootstrap over the turn's requests.", {"AL": MEASURED, "speedup": MEASURED})
        sec.values["by_turn"] = table.to_dict("records")


def build(data, out: Path) -> Section:
    sec = Section("context", "Speculation against context")
    cells = data.ok if not data.cells.empty else pd.DataFrame()
    rows = measurement_rows(data) if not data.cells.empty else pd.DataFrame()  # derived overall rows when present
    frame = bucket_frame(rows) if not rows.empty else pd.DataFrame()
    if frame.empty:
        sec.text("No cell recorded its steps' live context (`extra.by_context`): n/a.")
        return sec
    sec.text("Each speculative step is put in the bucket of its live context (prompt + output so far; bucket = "
             "lower edge in tokens, `acceptance.context_edges`). Per bucket: AL, mean draft / verify / step ms, and "
             "the speedup of that bucket's steps over the baseline's steps in the same bucket (ms per token) with a "
             "percentile bootstrap interval over target iterations. A step-level speedup: prefill is not in it.")
    order = ["drafter", "D", "B", "concurrency", "request_rate", "context", "dataset", "category"]  # context: size order
    show = frame.drop(columns=["low", "high", "schedule"]).sort_values(order)
    sec.table(show, "Acceptance and cost by live context.", {c: MEASURED for c in
                                                             ("AL", "draft ms", "verify ms", "step ms", "speedup")})
    sec.values["by_context"] = show.to_dict("records")
    if frame["context"].nunique() < 2:
        sec.text("One context bucket in these results: no spread to plot or to change D over.")
    else:
        _curves(sec, frame, out)
        _best_d(sec, data)
    _contrast(sec, bucket_frame(cells))  # per category: the entropy tiers are categories
    _turns(sec, rows)
    return sec
