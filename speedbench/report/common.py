"""The report's document model and the aggregations every section shares.

Conventions, stated once:

* a *mechanism* is a drafter as configured (column ``drafter``; its ``method`` feeds the cost
  model); a *configuration* is (mechanism, D, B) plus any setup column that varies across the
  results (target, backend, temperature, dataset, device);
* a configuration's value is the **mean over its cells** (categories x context buckets), each
  category weighted equally (SPEED-Bench's category averaging);
* every number carries its kind: ``measured`` (read from cells), ``modelled`` (the cost model
  or a formula), or is ``n/a`` (NaN: not measured) -- a gap is never a zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pandas as pd

from .. import metrics
from ..drafters.registry import is_baseline

MEASURED, MODELLED, DERIVED = "measured", "modelled", "modelled from measured times"
SETUP_CANDIDATES = ("target", "backend", "temperature", "dataset", "device", "max_new_tokens", "ignore_eos", "schedule")
MECH, D, B = "drafter", "num_speculative_tokens", "batch_size"
SLICE = ("category", "context_bucket")
NEARLY_FREE = 1.10  # G1: T_verif(B(1+D)) / T_verif(B) at or below this is "nearly free"


@dataclass
class Text:
    text: str


@dataclass
class Table:
    frame: pd.DataFrame
    caption: str = ""
    kinds: dict[str, str] = field(default_factory=dict)  # column -> measured | modelled | ...


@dataclass
class Figure:
    path: Path
    caption: str


Block = Union[Text, Table, Figure]


@dataclass
class Section:
    key: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # headline numbers (report.json, tests)

    def text(self, s: str) -> None:
        self.blocks.append(Text(s))

    def table(self, frame: pd.DataFrame, caption: str = "", kinds: dict[str, str] | None = None) -> None:
        self.blocks.append(Table(frame, caption, dict(kinds or {})))

    def figure(self, fig: Figure | None) -> None:
        if fig is not None:
            self.blocks.append(fig)


def setup_cols(cells: pd.DataFrame) -> list[str]:
    """Setup columns that vary across the results: every grouping keeps them apart."""
    return [c for c in SETUP_CANDIDATES if c in cells and cells[c].astype(str).nunique() > 1]


def spec_cells(ok: pd.DataFrame) -> pd.DataFrame:
    """Cells with speculation (D >= 1): a ``none`` drafter cell is a baseline, not a mechanism."""
    return ok[(ok[D] > 0) & ~ok["method"].map(is_baseline)] if not ok.empty else ok


def stable_cells(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(stable, unstable) cells. Results from before the measurement protocol (no ``stable``
    column) count as stable: nothing says otherwise."""
    if cells.empty or "stable" not in cells:
        return cells, cells.iloc[0:0]
    mask = cells["stable"].fillna(False).astype(bool)
    return cells[mask], cells[~mask]


def config_speedups(spec: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: the geometric mean of its cells' speedups and its interval, and how many are stable."""
    keys = setup_cols(spec) + [MECH, "method", D, B]
    rows = []
    for key, grp in spec.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        lo = grp["speedup_ci_low"] if "speedup_ci_low" in grp else grp["speedup"] * math.nan
        hi = grp["speedup_ci_high"] if "speedup_ci_high" in grp else grp["speedup"] * math.nan
        point, low, high = metrics.geomean_interval(list(grp["speedup"]), list(lo), list(hi))
        if not finite(point):  # no intervals (older results): the plain geometric mean
            point = metrics.geomean(list(grp["speedup"]))
        # the same prompts under every configuration: compare configurations on measurement noise alone
        noise = grp["speedup_noise"] if "speedup_noise" in grp else grp["speedup"] * math.nan
        _, n_low, n_high = metrics.geomean_interval(list(grp["speedup"]), list(grp["speedup"] * (1 - noise)),
                                                     list(grp["speedup"] * (1 + noise)))
        stable = int(grp["stable"].fillna(False).astype(bool).sum()) if "stable" in grp else len(grp)
        rows.append({**dict(zip(keys, key)), "speedup": point, "speedup_low": low, "speedup_high": high,
                     "noise_low": n_low, "noise_high": n_high, "stable": f"{stable}/{len(grp)}"})
    return pd.DataFrame(rows, columns=keys + ["speedup", "speedup_low", "speedup_high", "noise_low", "noise_high",
                                              "stable"])


def per_config(ok: pd.DataFrame, cols: list[str], extra_keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Mean of ``cols`` per configuration over its cells (NaN stays NaN; no cell, no row); speedup
    columns are ratios and average geometrically."""
    keys = setup_cols(ok) + [MECH, "method", D, B, *extra_keys]
    if ok.empty:
        return pd.DataFrame(columns=keys + cols)
    frame = ok[keys + cols].copy()
    for c in cols:
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    how = {c: (metrics.geomean if c.startswith("speedup") else "mean") for c in cols}  # ratios average geometrically
    return frame.groupby(keys, dropna=False, sort=True)[cols].agg(how).reset_index()


def best_by(frame: pd.DataFrame, group: list[str], value: str) -> pd.DataFrame:
    """Per group the row with the largest ``value`` (rows whose value is NaN never win)."""
    have = frame.dropna(subset=[value])
    if have.empty:
        return have
    idx = have.groupby(group, dropna=False)[value].idxmax()
    return have.loc[idx.values].reset_index(drop=True)


def slice_label(row: Any) -> str:
    bucket = row.get("context_bucket", "") if hasattr(row, "get") else ""
    return f"{row['category']}" + (f" / {bucket}" if bucket else "")


def finite(x: Any) -> bool:
    try:
        return x is not None and not math.isnan(float(x))
    except (TypeError, ValueError):
        return False


def fmt(v: Any) -> str:
    """One cell of a rendered table: NaN/None -> n/a, floats to 3 significant digits."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        if v != 0 and (abs(v) >= 1000 or abs(v) < 0.001):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v) if v else "n/a"
    try:
        if pd.isna(v):
            return "n/a"
    except (TypeError, ValueError):
        pass
    return str(v)


def mech_label(row: Any) -> str:
    return f"{row[MECH]}" if row[MECH] == row["method"] else f"{row[MECH]} ({row['method']})"


def same_setup(frame: pd.DataFrame, row: Any, cols: list[str]) -> pd.DataFrame:
    """Rows of ``frame`` with the same setup-column values as ``row``."""
    for c in cols:
        frame = frame[frame[c] == row[c]]
    return frame


def best_per_batch(ok: pd.DataFrame) -> pd.DataFrame:
    """Per (setup, B) the configuration with the best mean measured speedup."""
    spec = spec_cells(ok)
    conf = per_config(spec, ["speedup", "al"])
    return best_by(conf, setup_cols(spec) + [B], "speedup")


def contexts(ok: pd.DataFrame) -> pd.DataFrame:
    """Measured mean context per context bucket (prompt + half the output, from the requests)."""
    if ok.empty or "context_tokens" not in ok:
        return pd.DataFrame(columns=["context_bucket", "context_tokens"])
    return ok.groupby("context_bucket", dropna=False)["context_tokens"].mean().reset_index()
