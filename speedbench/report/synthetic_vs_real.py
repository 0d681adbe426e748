"""Synthetic against real acceptance: per load point, the real drafter's speedup, its synthetic twin's
(accepted counts drawn independently at the real cell's per-position acceptance), their ratio with its
interval, and the variance of the accepted length per step in each (``metrics.synthetic_vs_real``).

The number an InferenceX-style user needs: a throughput benchmark run with synthetic acceptance at
the "golden" AL reports the synthetic speedup; the ratio says how far that is from the drafter's own,
at the same load and the same per-position acceptance. The verdict never goes beyond the interval.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..metrics.synthetic_vs_real import compare, twins
from ..results.layout import RunFolder
from .common import MEASURED, Section


def _frame(roots, cell_id: str, kind: str) -> pd.DataFrame:
    for root in roots:
        folder = RunFolder(root)
        path = folder.requests_path(cell_id) if kind == "requests" else folder.steps_path(cell_id)
        if path.exists():
            return pd.read_parquet(path)
    return pd.DataFrame()


def comparison(cells: pd.DataFrame, roots, confidence: float = 0.95, n_resamples: int = 1000) -> list[dict]:
    """One row per (real, synthetic) twin pair of ``cells`` whose records are in ``roots``, by C."""
    rows = []
    for real, syn in twins(cells):
        frames = [_frame(roots, c["cell_id"], k) for c in (real, syn) for k in ("requests", "steps")]
        if any(f.empty for f in frames):
            continue
        rows.append({"drafter": real["drafter"]} | compare(real, syn, frames[0], frames[2], frames[1], frames[3],
                                                         confidence, n_resamples))
    return sorted(rows, key=lambda r: (r["drafter"], r["D"], r["C"]))


def _fmt_ci(ci) -> str:
    lo, hi = ci
    return f"[{lo:.3f}, {hi:.3f}]" if math.isfinite(lo) and math.isfinite(hi) else "n/a"


def build(data, out: Path) -> Section:
    sec = Section("synthetic_vs_real", "Synthetic against real acceptance")
    rows = comparison(data.ok, data.roots) if not data.cells.empty else []
    if not rows:
        sec.text("No real cell with a synthetic twin (scripts/synthetic_vs_real.py; docs/load.md): n/a.")
        return sec
    sec.text("Each real load point beside its synthetic twin: the same point with the accepted counts drawn "
             "independently per step and row at the real cell's per-position (conditional) acceptance, as "
             "vLLM's synthetic sampler draws them. ratio = speedup synthetic / speedup real on the shared "
             "requests; its interval is the wider of a paired two-level bootstrap (requests jointly, repeats "
             "per cell) and a Welch t-interval of the per-window log speedups. var step: variance over drafting "
             "steps of the accepted length (accepted + 1); var request AL: variance over requests of each "
             "request's AL (acceptance correlated within a request shows here).")
    table = pd.DataFrame([{
        "drafter": r["drafter"], "D": r["D"], "C": r["C"], "AL real": r["AL real"], "AL synthetic": r["AL synthetic"],
        "speedup real": r["speedup real"], "real CI": _fmt_ci(r["real CI"]),
        "speedup synthetic": r["speedup synthetic"], "synthetic CI": _fmt_ci(r["synthetic CI"]),
        "ratio": r["ratio"], "ratio CI": _fmt_ci(r["ratio CI"]),
        "var step real": r["var step real"], "var step synthetic": r["var step synthetic"],
        "var request AL real": r["var request AL real"], "var request AL synthetic": r["var request AL synthetic"],
        "verdict": r["verdict"]} for r in rows])
    sec.table(table, "Synthetic against real acceptance per load point (95% intervals).",
              {k: MEASURED for k in ("AL real", "AL synthetic", "speedup real", "speedup synthetic", "ratio",
                                     "var step real", "var step synthetic", "var request AL real",
                                     "var request AL synthetic")})
    sec.values["points"] = rows
    return sec
