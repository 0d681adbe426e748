"""The one-screen table printed at the end of a run."""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = [
    ("category", "category"),
    ("drafter", "drafter"),
    ("method", "method"),
    ("num_speculative_tokens", "D"),
    ("batch_size", "B"),
    ("concurrency", "C"),  # a load point's columns: shown when any cell ran one (LOAD_COLUMNS)
    ("request_rate", "rate"),
    ("n_requests", "n"),
    ("al", "AL"),
    ("al_speed_bench", "AL(SPEED-Bench)"),
    ("degenerate_frac", "loops"),
    ("acceptance_rate", "acc"),
    ("t_draft_ms", "draft ms"),
    ("t_verify_ms", "verify ms"),
    ("tpot_ms_baseline", "TPOT base"),
    ("tpot_ms_spec", "TPOT spec"),
    ("speedup", "speedup"),
    ("speedup_interval", "95% CI"),
    ("speedup_cv", "cv"),
    ("n_repeats", "reps"),
    ("speedup_predicted", "predicted"),
    ("stable", "stable"),
    ("greedy_match_rate", "match"),
    ("status", "status"),
]


def format_table(cells: pd.DataFrame) -> str:
    if cells.empty:
        return "(no cells)"
    order = [c for c in ("drafter", "category", "num_speculative_tokens", "batch_size") if c in cells.columns]
    cells = cells.sort_values(order, kind="stable") if order else cells
    if {"speedup_ci_low", "speedup_ci_high"} <= set(cells.columns):
        cells = cells.assign(speedup_interval=[
            "-" if not (math.isfinite(lo) and math.isfinite(hi)) else f"[{lo:.3g}, {hi:.3g}]"
            for lo, hi in zip(cells["speedup_ci_low"], cells["speedup_ci_high"])
        ])
    if "batch_size_run" in cells.columns and "batch_size" in cells.columns:  # B as asked, and as run where smaller
        cells = cells.assign(batch_size=[
            f"{b} (ran {r})" if _smaller(r, b) else b for b, r in zip(cells["batch_size"], cells["batch_size_run"])])
    if "schedule" in cells.columns and "num_speculative_tokens" in cells.columns:  # a schedule: D is its cap
        cells = cells.assign(num_speculative_tokens=[
            f"{d} (schedule)" if isinstance(sc, str) and sc else d
            for d, sc in zip(cells["num_speculative_tokens"], cells["schedule"])])
    cells = _load_point(cells)
    frame = cells[[c for c, _ in COLUMNS if c in cells.columns]].rename(columns=dict(COLUMNS))

    def fmt(v):
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return v

    return align(frame.apply(lambda col: col.map(fmt)), text=[label for c, label in COLUMNS if c in TEXT_COLUMNS])


LOAD_COLUMNS = ("concurrency", "request_rate")


def _load_point(cells: pd.DataFrame) -> pd.DataFrame:
    """C and rate as a load point ran (``-`` where a cell has none); dropped when no cell ran one, so rows of
    different load points never look identical."""
    if not set(LOAD_COLUMNS) <= set(cells.columns):
        return cells.drop(columns=[c for c in LOAD_COLUMNS if c in cells.columns])
    conc = pd.to_numeric(cells["concurrency"], errors="coerce")
    rate = pd.to_numeric(cells["request_rate"], errors="coerce")
    if not bool((conc > 0).any() or rate.map(math.isfinite).any()):
        return cells.drop(columns=list(LOAD_COLUMNS))
    return cells.assign(concurrency=[str(int(c)) if c > 0 else "-" for c in conc.fillna(-1)],
                        request_rate=[f"{r:g}/s" if math.isfinite(r) else "-" for r in rate.fillna(math.inf)])


def _smaller(ran, asked) -> bool:
    try:
        return 0 < int(ran) < int(asked)
    except (TypeError, ValueError):
        return False


TEXT_COLUMNS = {"category", "drafter", "method", "status"}


def align(frame: pd.DataFrame, text: list[str]) -> str:
    """A plain-text table: text columns left-aligned, numbers right-aligned."""
    cols = list(frame.columns)
    cells = [[str(v) for v in frame[c]] for c in cols]
    widths = [max([len(str(c)), *(len(v) for v in vals)]) for c, vals in zip(cols, cells)]

    def line(values):
        parts = [v.ljust(w) if c in text else v.rjust(w) for c, v, w in zip(cols, values, widths)]
        return "  ".join(parts).rstrip()

    rows = [line([str(c) for c in cols])]
    rows += [line(list(vals)) for vals in zip(*cells)]
    return "\n".join(rows)
