"""G1: raise D until verification becomes compute-bound.

Evidence: T_verif(B(1+D)) / T_verif(B) versus D for each B, from the cells (``t_verify_ms`` over
``t_verify_ms_baseline``: each cell measures both in matched runs), plus the GEMM M-sweep and
the engine verification sweep when ``speedbench microbench`` wrote them into the results.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plots
from .common import (B, D, DERIVED, MEASURED, NEARLY_FREE, Section, best_per_batch, finite, setup_cols, spec_cells,
                     stable_cells)
from ..results.load import ReportData

GEMM_KNEE = 0.8  # normalised TFLOP/s at which the GEMM counts as compute-bound


def verify_ratios(ok: pd.DataFrame, setup: list[str] | None = None) -> pd.DataFrame:
    """Per (setup, B, D): median t_verify_ms / median t_verify_ms_baseline over the cells.

    ``setup``: the setup columns to key by (default ``setup_cols(ok)``); a section that splits its
    cells (stable / unstable) passes those of all its cells, so that every part is keyed alike."""
    spec = spec_cells(ok)
    keys = (setup_cols(ok) if setup is None else list(setup)) + [B, D]
    if spec.empty:
        return pd.DataFrame(columns=keys + ["t_verify_ms", "t_verify_ms_baseline", "ratio"])
    g = spec.groupby(keys, dropna=False)
    out = g.agg(t_verify_ms=("t_verify_ms", "median"), t_verify_ms_baseline=("t_verify_ms_baseline", "median")).reset_index()
    out["ratio"] = out["t_verify_ms"] / out["t_verify_ms_baseline"]
    return out


def nearly_free(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per (setup, B): the largest D up to which every measured D is nearly free, and where that stops."""
    keys = [c for c in ratios.columns if c not in (D, "t_verify_ms", "t_verify_ms_baseline", "ratio")]
    rows = []
    for key, grp in ratios.groupby(keys, dropna=False):
        grp = grp.dropna(subset=["ratio"]).sort_values(D)
        free, stop = math.nan, math.nan
        for _, r in grp.iterrows():
            if r["ratio"] <= NEARLY_FREE:
                free = r[D]
            else:
                stop = r[D]
                break
        key = key if isinstance(key, tuple) else (key,)
        # a recommendation needs more than one measured D to compare
        rows.append({**dict(zip(keys, key)), "nearly free up to D": free, "stops being nearly free at D": stop,
                     "recommended D (G1)": free if grp[D].nunique() >= 2 else math.nan})
    return pd.DataFrame(rows)


def gemm_knee(gemm: pd.DataFrame) -> float:
    """Smallest M whose normalised TFLOP/s reaches GEMM_KNEE (NaN if none)."""
    hit = gemm[gemm["normalised"] >= GEMM_KNEE]
    return float(hit["m"].min()) if len(hit) else math.nan


def build(data: ReportData, out: Path) -> Section:
    sec = Section("g1", "G1 - raise D until verification is compute-bound")
    sec.text(
        "Verification runs B(1+D) tokens through the target in one forward. While the GEMMs are memory-bound "
        f"the extra tokens are nearly free; a ratio T_verif(B(1+D)) / T_verif(B) <= {NEARLY_FREE:g} counts as "
        "nearly free here. Ratios are **measured** (median over cells; both times come from the same cell's matched runs)."
    )
    # one key for every part: the setup columns of all ok cells, whichever of them are stable
    setup = setup_cols(data.ok)
    stable, unstable = stable_cells(data.ok)
    unstable = spec_cells(unstable)
    ratios = verify_ratios(stable, setup)
    shaky = verify_ratios(unstable, setup)
    sec.values["ratios"] = ratios.to_dict("records")
    sec.values["unstable_ratios"] = shaky.to_dict("records")
    if len(unstable):
        sec.text(f"{len(unstable)} unstable cell(s) left out of the verdict (see the summary's list): their ratios "
                 f"are shown on rows marked *{UNSTABLE_ROW}*; no verdict is drawn from them.")
    if ratios.empty and shaky.empty:
        sec.text("No speculative cell with verification times: n/a.")
    else:
        sec.table(_ratio_table(ratios, shaky, setup), "T_verif(B(1+D)) / T_verif(B) (measured; n/a = not measured).",
                  {c: MEASURED for c in _batch_columns(ratios, shaky)})
    if ratios.empty:
        if len(shaky):
            sec.text("No stable speculative cell with verification times: no verdict (n/a).")
    else:
        free = nearly_free(ratios)
        _no_d_pays(sec, free, stable, stable_cells(data.overall)[0])
        sec.values["nearly_free"] = free.to_dict("records")
        sec.table(free.rename(columns={B: "B"}), "Where verification stops being nearly free.",
                  {"nearly free up to D": MEASURED, "stops being nearly free at D": MEASURED,
                   "recommended D (G1)": DERIVED})
        series = [plots.Series(f"B={b}", list(g[D]), list(g["ratio"]))
                  for b, g in ratios.sort_values(D).groupby(B)]
        sec.figure(plots.lines(out / "g1_verify_ratio.png", series, plots.Axes(
            "draft length D", "T_verif(B(1+D)) / T_verif(B)", "G1: verification cost vs D (measured)", integer_x=True,
            hlines=[(1.0, ""), (NEARLY_FREE, f"nearly free ({NEARLY_FREE:g})")]), "Verification cost ratio vs D per batch size."))
    _gemm(sec, data, out)
    _verify_microbench(sec, data, out)
    return sec


UNSTABLE_ROW = "unstable, no verdict"


def _batch_columns(*parts: pd.DataFrame) -> list[str]:
    return [f"B={b}" for b in sorted({b for p in parts for b in p[B]})]


def _ratio_table(ratios: pd.DataFrame, shaky: pd.DataFrame, setup: list[str]) -> pd.DataFrame:
    """One row per (setup, D), one column per B: the stable cells' ratios (n/a where a D was not
    measured), then the unstable cells' rows, marked ``UNSTABLE_ROW`` in an evidence column (only
    when there are such rows)."""
    rows = []
    for part, mark in ((ratios, "stable"), (shaky, UNSTABLE_ROW)):
        if part.empty:
            continue
        pivot = part.pivot_table(index=setup + [D], columns=B, values="ratio", aggfunc="first", dropna=False)
        if mark == UNSTABLE_ROW:
            pivot = pivot.dropna(how="all")  # only what the unstable cells measured
        pivot.columns = [f"B={c}" for c in pivot.columns]
        rows.append(pivot.reset_index().assign(evidence=mark) if not shaky.empty else pivot.reset_index())
    table = pd.concat(rows, ignore_index=True)
    return table[[c for c in table.columns if not c.startswith("B=")] + _batch_columns(ratios, shaky)].rename(columns={D: "D"})


def _no_d_pays(sec: Section, free: pd.DataFrame, stable: pd.DataFrame, overall: pd.DataFrame) -> None:
    """G1 reads verification cost only: where even the best measured D of a configuration at a batch
    size is slower than plain decoding, its recommended D is withdrawn and the section says why."""
    best = best_per_batch(stable, overall)
    if best.empty or free.empty:
        return
    keys = [c for c in free.columns if c in best.columns and c not in ("speedup", "al")]
    merged = free[keys].merge(best[keys + ["speedup"]], on=keys, how="left")
    slow = merged["speedup"].apply(lambda x: finite(x) and x < 1).to_numpy()
    if not slow.any():
        return
    free.loc[slow, "recommended D (G1)"] = math.nan
    for b, x in sorted({(int(r[B]), float(r["speedup"])) for _, r in merged[slow].iterrows()}):
        sec.text(f"At B = {b} no D pays: the best measured speedup is {x:.2f}x (slower than plain decoding), "
                 "so G1 recommends no D there, however cheap verification is.")


def _gemm(sec: Section, data: ReportData, out: Path) -> None:
    gemm = data.microbench.get("gemm")
    if gemm is None or gemm.empty:
        sec.text("GEMM microbenchmark: n/a (run `speedbench microbench gemm --results-dir RESULTS_DIR`).")
        return
    by_m = gemm.groupby("m", as_index=False).agg(tflops=("tflops", "median"), n=("n", "first"), k=("k", "first"),
                                                   device=("device", "first"), dtype=("dtype", "first"))
    by_m["normalised"] = by_m["tflops"] / by_m["tflops"].max()
    knee = gemm_knee(by_m)
    sec.values["gemm_knee_m"] = knee
    dev = f"{by_m['device'].iloc[0]}, {by_m['dtype'].iloc[0]}, N={by_m['n'].iloc[0]}, K={by_m['k'].iloc[0]}"
    sec.text(f"GEMM M-sweep ({dev}; **measured**): normalised TFLOP/s reaches {GEMM_KNEE:g} at M = "
             f"{'n/a' if math.isnan(knee) else int(knee)}. With M = B(1+D), a batch B reaches that point at "
             "D = ceil(M_knee / B) - 1: at D = 7 it needs 1/8 of the batch needed at D = 0.")
    batches = sorted(set(data.ok[B]) if not data.ok.empty else set()) or sorted(set(gemm["batch"].dropna().astype(int)))
    rows = [{"B": b, "D where the GEMM turns compute-bound": (max(0, math.ceil(knee / b) - 1) if not math.isnan(knee) else math.nan)}
            for b in batches]
    if rows:
        sec.table(pd.DataFrame(rows), "From the GEMM sweep (measured M_knee).",
                  {"D where the GEMM turns compute-bound": MEASURED})
    sec.table(by_m[["m", "tflops", "normalised"]].rename(columns={"m": "M", "tflops": "TFLOP/s"}), "",
              {"TFLOP/s": MEASURED, "normalised": MEASURED})
    sec.figure(plots.lines(out / "g1_gemm.png", [plots.Series("linear layer", list(by_m["m"]), list(by_m["normalised"]))],
                           plots.Axes("M = B(1+D)", "normalised TFLOP/s", f"G1: GEMM throughput vs M (measured; {dev})",
                                      logx=True, hlines=[(GEMM_KNEE, f"compute-bound ({GEMM_KNEE:g})")]),
                           "Normalised GEMM throughput over M."))


def _verify_microbench(sec: Section, data: ReportData, out: Path) -> None:
    ver = data.microbench.get("verify")
    if ver is None or ver.empty:
        return
    pivot = ver.pivot_table(index="depth", columns="batch", values="ratio", aggfunc="median", dropna=False)
    pivot.columns = [f"B={c}" for c in pivot.columns]
    sec.text(f"Engine verification sweep (`microbench verify`, target {ver['target'].iloc[0]}, context "
             f"{int(ver['context'].iloc[0])}, {ver['device'].iloc[0]}): T_verif(B(1+D)) / T_verif(B), **measured**.")
    sec.table(pivot.reset_index().rename(columns={"depth": "D"}), "", {c: MEASURED for c in pivot.columns})
    series = [plots.Series(f"B={b}", list(g["depth"]), list(g["ratio"])) for b, g in ver.sort_values("depth").groupby("batch")]
    sec.figure(plots.lines(out / "g1_verify_microbench.png", series, plots.Axes(
        "draft length D", "T_verif(B(1+D)) / T_verif(B)", "G1: engine verification sweep (measured)", integer_x=True,
        hlines=[(NEARLY_FREE, f"nearly free ({NEARLY_FREE:g})")]), "Engine verification sweep."))
