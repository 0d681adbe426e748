"""The report's document model and the aggregations every section shares.

Conventions, stated once:

* a *mechanism* is a drafter as configured (column ``drafter``; its ``method`` feeds the cost
  model); a *configuration* is (mechanism, D, B) plus any setup column that varies across the
  results (target, backend, temperature, dataset, device);
* a configuration's speedup, interval and AL come from one rule (``config_speedups``): its derived
  ``category=all`` row (one per context bucket; pooled by requests, docs/acceptance.md) where it
  has one, so the console's ``all`` row and every report section agree; a configuration with one
  cell: that cell; otherwise the geometric mean over its cells (categories x context buckets);
* a configuration's load point (``concurrency``, ``request_rate``) is part of its key wherever a
  cell has one set (``LOAD_COLUMNS``): no configuration merges different load points;
* every number carries its kind: ``measured`` (read from cells), ``modelled`` (the cost model
  or a formula), or is ``n/a`` (NaN: not measured) -- a gap is never a zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import pandas as pd

from .. import evidence, metrics
from ..drafters.registry import is_baseline

MEASURED, MODELLED, DERIVED = "measured", "modelled", "modelled from measured times"
# acceptance_kind (results.load): "synthetic" for forced-acceptance cells, "real" else; a setup column only in
# a folder that holds both, so a synthetic twin never pools with the real cell of its load point
SETUP_CANDIDATES = ("target", "backend", "temperature", "dataset", "device", "max_new_tokens", "ignore_eos", "schedule",
                    "acceptance_kind")
LOAD_COLUMNS = ("concurrency", "request_rate")  # a load point: part of every configuration's key when set
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
        """A table as rendered: a load column no row sets (``load_point_column``) is left out."""
        self.blocks.append(Table(load_point_column(frame), caption, dict(kinds or {})))

    def figure(self, fig: Figure | None) -> None:
        if fig is not None:
            self.blocks.append(fig)


def device_unit(cells: pd.DataFrame) -> str:
    """What the ``*_per_gpu`` rates are per: ``GPU`` when every cell ran on one, else ``device`` (a CPU run
    records n_gpus 0 and counts itself as one device; synthetic and remote cells say no GPU either)."""
    devices = cells["device"].astype(str) if "device" in cells.columns else pd.Series(dtype=str)
    gpus = cells["n_gpus"] if "n_gpus" in cells.columns else pd.Series(dtype=float)
    on_gpus = len(devices) and devices.str.startswith("cuda").all() and (pd.to_numeric(gpus, errors="coerce") > 0).all()
    return "GPU" if on_gpus else "device"


def setup_cols(cells: pd.DataFrame) -> list[str]:
    """Setup columns that vary across the results, then the load-point columns when any cell has a load
    point set (``load_cols``): every grouping keeps them apart and every table shows them."""
    return [c for c in SETUP_CANDIDATES if c in cells and cells[c].astype(str).nunique() > 1] + load_cols(cells)


def load_cols(cells: pd.DataFrame) -> list[str]:
    """``concurrency`` and ``request_rate`` when any cell ran a load point (concurrency >= 1 or a finite rate)."""
    if cells.empty or not set(LOAD_COLUMNS) <= set(cells.columns):
        return []
    conc = pd.to_numeric(cells["concurrency"], errors="coerce")
    rate = pd.to_numeric(cells["request_rate"], errors="coerce")
    return list(LOAD_COLUMNS) if bool((conc > 0).any() or rate.map(math.isfinite).any()) else []


def point_text(setup: list[str], key: tuple) -> str:
    """Where a configuration ran, for a sentence or a title: its setup columns as ``name=value``, then its load
    point (``C=4``, ``rate=2/s``: ``columns.load_label``) where it has one, else ``B = <batch size>``. A load point
    sets its own requests in flight, so it is never named by B (``key`` = the values of ``setup`` + [B])."""
    from ..columns import load_label

    values = dict(zip(setup, key))
    load = load_label({c: pd.to_numeric(values.get(c), errors="coerce") for c in LOAD_COLUMNS if c in values}
                      | {c: float(values[c]) for c in LOAD_COLUMNS if finite(values.get(c))}).strip()
    rest = [f"{c}={v}" for c, v in values.items() if c not in LOAD_COLUMNS]
    return ", ".join(rest + [load.replace(" ", ", ") if load else f"B = {int(key[-1])}"])


def baseline_spread(cells: pd.DataFrame, by: list[str] | None = None) -> str:
    """Whether absolute throughputs of ``cells`` are comparable: "" when every group of ``by`` (all cells when
    none) has baseline TPOTs within the noise, else a sentence naming the widest range. The noise: twice the
    cells' median ``speedup_noise`` (the relative half-width with the prompts fixed; the protocol's 2% target
    where none is recorded): baseline TPOTs further apart than that are different machine states, not the
    configurations' doing."""
    if cells.empty or "tpot_ms_baseline" not in cells:
        return ""
    noise = pd.to_numeric(cells.get("speedup_noise", pd.Series(dtype=float)), errors="coerce").dropna()
    limit = 2 * (float(noise.median()) if len(noise) else 0.02)
    worst = None
    groups = cells.groupby(by, dropna=False) if by else [((), cells)]
    for key, grp in groups:
        tpot = pd.to_numeric(grp["tpot_ms_baseline"], errors="coerce").dropna()
        tpot = tpot[tpot > 0]
        if len(tpot) < 2:
            continue
        rel = float(tpot.max() / tpot.min() - 1)
        if rel > limit and (worst is None or rel > worst[0]):
            worst = (rel, float(tpot.min()), float(tpot.max()), key)
    if worst is None:
        return ""
    rel, lo, hi, key = worst
    key = key if isinstance(key, tuple) else (key,)
    from ..columns.labels import LABELS

    named = [f"{LABELS[c].text if c in LABELS else c}={v}" for c, v in zip(by or (), key)
             if str(v) not in ("", "nan", "inf", "-1")]
    where = " at " + ", ".join(named) if named else ""
    return (f"baseline TPOT ranged {lo:.3g}-{hi:.3g} ms across cells{where} ({rel:+.0%}, more than the noise "
            f"{limit:.0%}): absolute throughputs are not comparable across these cells")


def spec_cells(ok: pd.DataFrame) -> pd.DataFrame:
    """Cells with speculation (D >= 1): a ``none`` drafter cell is a baseline, not a mechanism."""
    return ok[(ok[D] > 0) & ~ok["method"].map(is_baseline)] if not ok.empty else ok


def stable_cells(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(stable, unstable) cells. Results from before the measurement protocol (no ``stable``
    value, a whole folder or some cells of it) count as stable: nothing says otherwise
    (``evidence.stable_value``, the rule every verdict reads)."""
    if cells.empty or "stable" not in cells:
        return cells, cells.iloc[0:0]
    mask = cells["stable"].map(evidence.stable_value).astype(bool)
    return cells[mask], cells[~mask]


SOURCE_ALL, SOURCE_CELL, SOURCE_GEO = "all row", "its one cell", "geometric mean over its cells"


def config_speedups(spec: pd.DataFrame, overall: pd.DataFrame | None = None) -> pd.DataFrame:
    """The one rule for a configuration's speedup, interval, AL and stability, read by every section.

    Per configuration (``setup_cols`` + mechanism, D, B): the rows it is read from (``source``) are its
    derived ``all`` rows (``overall``, one per context bucket) when there is one for each of its context
    buckets, else its cells. One row: its speedup, interval and AL as they are. Several: the geometric
    mean of their speedups with ``metrics.geomean_interval``, the mean AL. ``stable`` counts the stable
    *cells* of the configuration (never its derived rows: a configuration of 3 cells read from its one ``all``
    row is "n of 3 cells", not "1 of 1"); ``unstable`` is ``evidence.unstable_note`` of those cells, or names the
    pooled row when it alone is unstable (``_stability``)."""
    keys = setup_cols(spec) + [MECH, "method", D, B]
    derived = _by_key(overall, keys) if overall is not None and not overall.empty else {}
    rows = []
    for key, grp in spec.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        mine = derived.get(_norm(key))
        buckets = set(grp["context_bucket"].astype(str)) if "context_bucket" in grp else {""}
        if mine is not None and set(mine["context_bucket"].astype(str)) >= buckets:
            src, source = mine, SOURCE_ALL
        else:
            src, source = grp, SOURCE_CELL if len(grp) == 1 else SOURCE_GEO
        rows.append({**dict(zip(keys, key)), **_values(src), **_stability(grp, src, source), "source": source})
    return pd.DataFrame(rows, columns=keys + ["speedup", "speedup_low", "speedup_high", "noise_low", "noise_high",
                                              "stable", "unstable", "al", "al_speed_bench", "rows", "source"])


def _stability(cells: pd.DataFrame, src: pd.DataFrame, source: str) -> dict:
    """``stable`` (stable cells / cells) and ``unstable`` (the caveat) of a configuration, counted over its cells."""
    records = [r for _, r in cells.iterrows()]
    stable = sum(1 for r in records if evidence.is_stable(r))
    note = evidence.unstable_note(records)
    if not note and source == SOURCE_ALL and not all(evidence.is_stable(r) for _, r in src.iterrows()):
        note = f"unstable: the pooled all row (0 of {len(records)} cells)"
    return {"stable": f"{stable}/{len(records)}", "unstable": note}


def _norm(key: tuple) -> tuple:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else str(v) for v in key)


def _by_key(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, pd.DataFrame]:
    frame = spec_cells(frame)
    if frame.empty or not set(keys) <= set(frame.columns):
        return {}
    return {_norm(k if isinstance(k, tuple) else (k,)): g for k, g in frame.groupby(keys, dropna=False, sort=False)}


def _col(grp: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(grp[name], errors="coerce") if name in grp else grp["speedup"] * math.nan


def _values(src: pd.DataFrame) -> dict:
    """Speedup, intervals and AL of the rows a configuration is read from (its stability: ``_stability``)."""
    s, lo, hi, noise = (_col(src, c) for c in ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup_noise"))
    if len(src) == 1:
        point, low, high = float(s.iloc[0]), float(lo.iloc[0]), float(hi.iloc[0])
        n_low, n_high = point * (1 - float(noise.iloc[0])), point * (1 + float(noise.iloc[0]))
    else:
        point, low, high = metrics.geomean_interval(list(s), list(lo), list(hi))
        if not finite(point):  # no intervals (older results): the plain geometric mean
            point = metrics.geomean(list(s))
        # the same prompts under every configuration: compare configurations on measurement noise alone
        _, n_low, n_high = metrics.geomean_interval(list(s), list(s * (1 - noise)), list(s * (1 + noise)))
    return {"speedup": point, "speedup_low": low, "speedup_high": high, "noise_low": n_low, "noise_high": n_high,
            "al": float(_col(src, "al").mean()), "al_speed_bench": float(_col(src, "al_speed_bench").mean()),
            "rows": len(src)}


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
    """One cell of a rendered table: NaN/None -> the empty-cell marker (``columns.labels.EMPTY``), floats to 3
    significant digits."""
    from ..columns.labels import EMPTY

    if v is None:
        return EMPTY
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return EMPTY
        if v != 0 and (abs(v) >= 1000 or abs(v) < 0.001):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v) if v else EMPTY
    try:
        if pd.isna(v):
            return EMPTY
    except (TypeError, ValueError):
        pass
    return str(v)


def interval_text(lo: Any, hi: Any) -> str:
    """``[low, high]`` to 3 significant digits, or the empty-cell marker when either end is not measured."""
    from ..columns.labels import EMPTY

    return f"[{float(lo):.3g}, {float(hi):.3g}]" if finite(lo) and finite(hi) else EMPTY


def with_intervals(frame: pd.DataFrame, points: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with each ``<point>_ci_low`` / ``<point>_ci_high`` pair joined into one ``<point>_interval``
    text column right after ``<point>`` (a table shows an interval as one cell, not two raw columns)."""
    out = frame.copy()
    for p in points:
        lo, hi = f"{p}_ci_low", f"{p}_ci_high"
        if lo not in out or hi not in out:
            continue
        out.insert(list(out.columns).index(lo), f"{p}_interval", [interval_text(a, b) for a, b in zip(out[lo], out[hi])])
        out = out.drop(columns=[lo, hi])
    return out


def load_point_column(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``concurrency`` and ``request_rate`` columns where any row sets them (a context or load
    table never shows identical-looking rows of different load points); a column no row sets is dropped."""
    conc = pd.to_numeric(frame.get("concurrency", pd.Series(-1, index=frame.index)), errors="coerce").fillna(-1)
    rate = pd.to_numeric(frame.get("request_rate", pd.Series(math.inf, index=frame.index)), errors="coerce")
    unset = [c for c, none in (("concurrency", bool((conc < 1).all())),
                               ("request_rate", not rate.map(math.isfinite).any())) if c in frame and none]
    return frame.drop(columns=unset)


def mech_label(row: Any) -> str:
    return f"{row[MECH]}" if row[MECH] == row["method"] else f"{row[MECH]} ({row['method']})"


def same_setup(frame: pd.DataFrame, row: Any, cols: list[str]) -> pd.DataFrame:
    """Rows of ``frame`` with the same setup-column values as ``row``."""
    for c in cols:
        frame = frame[frame[c] == row[c]]
    return frame


def best_per_batch(ok: pd.DataFrame, overall: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (setup and load point, B) the configuration with the best speedup by the one rule (``config_speedups``)."""
    spec = spec_cells(ok)
    if spec.empty:
        return pd.DataFrame(columns=setup_cols(spec) + [MECH, "method", D, B, "speedup", "al"])
    return best_by(config_speedups(spec, overall), setup_cols(spec) + [B], "speedup")


def contexts(ok: pd.DataFrame) -> pd.DataFrame:
    """Measured mean context per context bucket (prompt + half the output, from the requests)."""
    if ok.empty or "context_tokens" not in ok:
        return pd.DataFrame(columns=["context_bucket", "context_tokens"])
    return ok.groupby("context_bucket", dropna=False)["context_tokens"].mean().reset_index()
