"""The one-screen table printed at the end of a run.

It fits :data:`WIDTH` columns: the columns a reader needs to judge a cell, load-point columns (C,
rate) when any cell has a load point, the context bucket when the cells span several, and the
columns that flag a problem (loops, match, method) only when some cell shows one; every column
with ``wide=True`` (``speedbench run --wide``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..columns import load_label
from ..columns.labels import short

WIDTH = 120  # the widest line of the default table
WIDE_HINT = "(speedbench run --wide: every column)"


def _any(pred: Callable[[pd.Series], pd.Series]) -> Callable[[pd.DataFrame, str], bool]:
    return lambda cells, key: bool(pred(cells[key]).any())


def _numeric(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce")


@dataclass(frozen=True)
class Column:
    key: str  # the cell-table column
    label: str  # columns.labels.short(key): the console's header from the one label table
    text: bool = False  # left-aligned
    wide: bool = False  # only with --wide (unless ``when`` says a cell needs it)
    when: Callable[[pd.DataFrame, str], bool] | None = None  # shown by default only when this holds

    def shown(self, cells: pd.DataFrame, wide: bool) -> bool:
        if self.key not in cells.columns:
            return False
        if wide:
            return True
        return (self.when(cells, self.key) if self.when is not None else not self.wide)


COLUMNS = [
    Column("category", short("category"), text=True),
    Column("context_bucket", short("context_bucket"), text=True,  # a sweep over context lengths (throughput splits)
           when=lambda c, k: c[k].fillna("").astype(str).nunique() > 1),
    Column("drafter", short("drafter"), text=True),
    Column("method", short("method"), text=True, wide=True,
           when=lambda c, k: "drafter" in c.columns and bool((c[k].astype(str) != c["drafter"].astype(str)).any())),
    Column("num_speculative_tokens", short("num_speculative_tokens")),
    Column("batch_size", short("batch_size")),
    # -1: load.concurrency unset; inf: closed loop
    Column("concurrency", short("concurrency"), when=_any(lambda s: _numeric(s).fillna(-1) >= 0)),
    Column("request_rate", short("request_rate"), when=_any(lambda s: _numeric(s).apply(math.isfinite))),
    Column("n_requests", short("n_requests")),
    Column("al", short("al")),
    Column("al_speed_bench", short("al_speed_bench"), wide=True),
    Column("degenerate_frac", short("degenerate_frac"), wide=True, when=_any(lambda s: _numeric(s).fillna(0) > 0)),
    Column("acceptance_rate", short("acceptance_rate")),
    Column("t_draft_ms", short("t_draft_ms")),
    Column("t_verify_ms", short("t_verify_ms")),
    Column("tpot_ms_baseline", short("tpot_ms_baseline"), wide=True),
    Column("tpot_ms_spec", short("tpot_ms_spec"), wide=True),
    Column("speedup", short("speedup")),
    Column("speedup_interval", short("speedup_interval")),
    Column("speedup_cv", short("speedup_cv"), wide=True),
    Column("n_repeats", short("n_repeats")),
    Column("speedup_predicted", short("speedup_predicted")),
    Column("stable", short("stable"), text=True),
    Column("greedy_match_rate", short("greedy_match_rate"), wide=True, when=_any(lambda s: _numeric(s).fillna(1) < 1)),
    Column("status", short("status"), text=True),
]
# dropped in this order (and named under the table) when a default table is still wider than WIDTH
FIT_ORDER = ["method", "predicted", "reps", "draft ms", "verify ms", "acc", "loops", "rate"]

# the short form of each unstable reason (pipeline.protocol and pipeline.cells word them in full)
SHORT_REASONS: list[tuple[str, Callable[[re.Match], str]]] = [
    (r"(\d+) request\(s\) failed", lambda m: "failed"),
    (r"no_drafts", lambda m: "no drafts"),
    (r"one repeat", lambda m: "1 repeat"),
    (r"no finite speedup interval", lambda m: "no CI"),
    (r"measurement noise \+-([\d.]+%)", lambda m: f"noise {m.group(1)}"),
    (r"contention", lambda m: "contention"),
    (r"client_bound", lambda m: "client-bound"),
]


def short_reason(reason: str) -> str:
    """``noise 7.2%, contention`` from an ``unstable_reason`` ('' when it names none of the known reasons)."""
    found = [short(m) for pattern, short in SHORT_REASONS if (m := re.search(pattern, reason or ""))]
    return ", ".join(found)


def stable_text(stable, reason) -> str:
    if bool(stable):
        return "yes"
    short = short_reason(reason if isinstance(reason, str) else "")
    return f"NO ({short})" if short else "NO"


def format_table(cells: pd.DataFrame, *, wide: bool = False) -> str:
    """The run's cell table; ``wide``: every column (else it fits :data:`WIDTH`, a note names what it left out)."""
    if cells.empty:
        return "(no cells)"
    order = [c for c in ("drafter", "category", "context_bucket", "num_speculative_tokens", "batch_size", "concurrency",
                         "request_rate") if c in cells.columns]
    cells = cells.sort_values(order, kind="stable", key=_sort_key) if order else cells
    cells = _display_values(cells)
    shown = [c for c in COLUMNS if c.shown(cells, wide)]
    frame = cells[[c.key for c in shown]].rename(columns={c.key: c.label for c in shown}).apply(lambda col: col.map(_fmt))
    text = [c.label for c in shown if c.text]
    table, dropped = align(frame, text), []
    for label in FIT_ORDER if not wide else []:
        if max(map(len, table.splitlines())) <= WIDTH:
            break
        if label in frame.columns:
            frame, dropped = frame.drop(columns=[label]), [*dropped, label]
            table = align(frame, text)
    hidden = [c for c in COLUMNS if c.key in cells.columns and not c.shown(cells, wide)]
    if dropped:
        return table + f"\nleft out to fit {WIDTH} columns: {', '.join(dropped)} {WIDE_HINT}"
    return table + (f"\n{WIDE_HINT}" if hidden else "")


def _sort_key(col: pd.Series) -> pd.Series:
    """Context buckets by their size ("2k" before "16k"; one that names no size last); every other column as it is."""
    if col.name != "context_bucket":
        return col
    return col.map(lambda b: _bucket_tokens(str(b)))


def _bucket_tokens(bucket: str) -> float:
    from ..data.build import size_tokens

    try:
        return size_tokens(bucket)
    except ValueError:
        return math.inf


def _display_values(cells: pd.DataFrame) -> pd.DataFrame:
    """Columns as the table shows them: the interval, B as run, D of a schedule, C and rate, stable with its reason."""
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
    if "batch_size" in cells.columns:  # a load point sets its own requests in flight (C or the rate): B is not it
        point = [bool(load_label(r)) for _, r in cells.iterrows()]
        cells = cells.assign(batch_size=["-" if p else b for p, b in zip(point, cells["batch_size"])])
    if "concurrency" in cells.columns:
        cells = cells.assign(concurrency=[c if _numeric(pd.Series([c])).iloc[0] >= 0 else "-" for c in cells["concurrency"]])
    if "request_rate" in cells.columns:
        cells = cells.assign(request_rate=[r if isinstance(r, (int, float)) and math.isfinite(r) else "-"
                                           for r in cells["request_rate"]])
    if "stable" in cells.columns:
        reasons = cells["unstable_reason"] if "unstable_reason" in cells.columns else [""] * len(cells)
        cells = cells.assign(stable=[stable_text(s, r) for s, r in zip(cells["stable"], reasons)])
    return cells


def _fmt(v):
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return v


def _smaller(ran, asked) -> bool:
    try:
        return 0 < int(ran) < int(asked)
    except (TypeError, ValueError):
        return False


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
