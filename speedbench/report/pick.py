"""The report's *What to pick* as the one line (per batch size or load point) ``speedbench run`` ends with.

Read from the same computation as the report's summary (``summary.config_table`` and
``summary.recommend`` over ``results.load``): the line restates the report's pick, never a verdict
of its own.

* ``pick: <drafter> D=<d> speedup 1.23 [1.10, 1.35] on <dataset>`` where the report picks one;
* ``nothing beats plain decoding (best: <drafter> D=<d> speedup 0.95 [0.90, 1.00] on <dataset>)``;
* ``undecided: best <drafter> D=<d> speedup ... (the report: <its pick: a tie, no verdict, interval includes 1>)``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import B, D, MECH, best_by, finite, same_setup, setup_cols, spec_cells

UNDECIDED = ("tie", "none with confidence", "no verdict")  # the report's picks that decide nothing


def pick_lines(root: str | Path) -> list[str]:
    """The one-line picks of the results folder ``root`` (one per batch size / load point / setup)."""
    from ..backends.registry import simulated_backends
    from ..results.load import load
    from .summary import config_table, recommend

    data = load([root])
    spec = spec_cells(data.ok) if not data.ok.empty else data.ok
    if spec.empty:
        return ["pick: n/a (no speculative cell was measured)"]
    synthetic = bool(set(simulated_backends()) & set(data.backends))
    conf = config_table(spec, data.overall)
    picks = recommend(spec, conf, synthetic)
    setup = setup_cols(spec)
    best = best_by(conf, setup + [B], "speedup")
    lines = [_line(row, best, spec, setup, several=len(picks) > 1) for _, row in picks.iterrows()]
    return [ln + (" (synthetic backend: modelled, not measured)" if synthetic else "") for ln in lines]


def _line(row: pd.Series, best: pd.DataFrame, spec: pd.DataFrame, setup: list[str], several: bool) -> str:
    pick = str(row["pick"])
    top = same_setup(best[best[B] == row["B"]], row, setup)
    name = f"{top.iloc[0][MECH]} D={int(top.iloc[0][D])}" if len(top) else "n/a"
    numbers = (f"speedup {row['speedup']:.2f} {row['interval']}" if finite(row["speedup"]) else "speedup n/a")
    where = f"on {_where(row, spec, setup, several)}"
    if pick.startswith("none (plain"):
        return f"nothing beats plain decoding (best: {name} {numbers} {where})"
    if pick.startswith(UNDECIDED):
        return f"undecided: best {name} {numbers} {where} (the report: {pick})"
    return f"pick: {pick} {numbers} {where}"


def _where(row: pd.Series, spec: pd.DataFrame, setup: list[str], several: bool) -> str:
    """The dataset, and (when the run has several picks) what tells them apart: B, the load point, the setup."""
    rows = same_setup(spec[spec[B] == row["B"]], row, setup)
    datasets = sorted({str(d) for d in rows.get("dataset", pd.Series(dtype=str)).dropna()}) or ["n/a"]
    parts = [", ".join(datasets)]
    if several:
        point = [f"C={int(row['concurrency'])}" if c == "concurrency" and finite(row.get(c)) and row.get(c) >= 1
                 else f"rate={row[c]:g}/s" if c == "request_rate" and finite(row.get(c)) else ""
                 for c in setup if c in ("concurrency", "request_rate")]
        other = [f"{c}={row[c]}" for c in setup if c not in ("concurrency", "request_rate", "dataset")]
        parts += [p for p in point if p] or [f"B={int(row['B'])}"]
        parts += other
    return " ".join(parts)
