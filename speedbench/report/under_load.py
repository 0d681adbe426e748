"""Speculation under load: speedup vs concurrency per drafter, where it stops paying, the
per-user vs per-GPU throughput Pareto, goodput vs request rate, and random vs real prompts.

Reads load-point cells (``concurrency`` >= 1 or a finite ``request_rate``; docs/load.md). A
point is *net-negative* when its speedup interval lies below 1, *pays* when it lies above 1,
and is a *tie* otherwise; a drafter *stops paying* at the smallest concurrency from which no
point pays. Unstable points are shown and marked, and never decide a verdict.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plots
from .common import D, DERIVED, MEASURED, MECH, Section, finite, spec_cells
from ..results.load import ReportData

RANDOM = "random"


def load_points(ok: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(closed-loop, open-loop) speculative load-point cells."""
    if ok.empty or "concurrency" not in ok:
        return ok.iloc[0:0], ok.iloc[0:0]
    spec = spec_cells(ok)
    conc = pd.to_numeric(spec["concurrency"], errors="coerce").fillna(-1)
    rate = pd.to_numeric(spec["request_rate"], errors="coerce").fillna(math.inf)
    return spec[(conc >= 1) & ~rate.map(math.isfinite)], spec[rate.map(math.isfinite)]


def verdict(low: float, high: float) -> str:
    if finite(high) and high < 1:
        return "net-negative"
    if finite(low) and low > 1:
        return "pays"
    return "tie" if finite(low) and finite(high) else "n/a"


def _stable(row) -> bool:
    return bool(row.get("stable", True)) if "stable" in row else True


def stops_paying(points: pd.DataFrame) -> str:
    """The smallest concurrency from which no stable point of one drafter pays, in words."""
    rows = points.sort_values("concurrency")
    stable = rows[rows.apply(_stable, axis=1)]
    if stable.empty:
        return "no stable point: no verdict"
    pays = [int(c) for c, v in zip(stable["concurrency"], stable["verdict"]) if v == "pays"]
    later = [int(c) for c in stable["concurrency"] if not pays or c > max(pays)]
    if not later:
        return f"pays at every measured concurrency (up to {int(stable['concurrency'].max())})"
    first = min(later)
    neg = [int(c) for c, v in zip(stable["concurrency"], stable["verdict"]) if v == "net-negative"]
    tail = f"; net-negative at C = {', '.join(map(str, neg))}" if neg else ""
    return f"stops paying at C = {first}" + (" (never pays)" if not pays else "") + tail


def _closed(sec: Section, closed: pd.DataFrame, out: Path) -> None:
    frame = closed.copy()
    frame["verdict"] = [verdict(lo, hi) for lo, hi in zip(frame["speedup_ci_low"], frame["speedup_ci_high"])]
    cols = ["dataset", MECH, D, "concurrency", "al", "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_throughput",
            "speedup_throughput_ci_low", "speedup_throughput_ci_high", "tpot_ms_p99_spec", "itl_token_ms_p99_spec",
            "verdict", "stable"]
    table = frame[[c for c in cols if c in frame]].sort_values(["dataset", MECH, D, "concurrency"])
    sec.values["points"] = table.to_dict("records")
    sec.table(table.rename(columns={MECH: "drafter", D: "D", "speedup": "speedup (TPOT)"}),
              "Closed-loop points: speedup of TPOT and of throughput against the matched baseline at the same "
              "concurrency, with intervals.",
              {"al": MEASURED, "speedup (TPOT)": MEASURED, "speedup_throughput": MEASURED, "verdict": DERIVED})
    lines, stop = [], {}
    for (ds, mech, d), grp in frame.groupby(["dataset", MECH, D]):
        stop[f"{ds}/{mech}/D={d}"] = stops_paying(grp)
        lines.append(f"- {mech} (D = {d}, {ds}): {stop[f'{ds}/{mech}/D={d}']}.")
    sec.values["stops_paying"] = stop
    sec.text("\n".join(lines))
    series = []
    for i, ((ds, mech, d), grp) in enumerate(frame.sort_values("concurrency").groupby(["dataset", MECH, D])):
        series.append(plots.Series(f"{mech} D={d} ({ds})", list(grp["concurrency"]), list(grp["speedup"]), "-o",
                                   color=f"C{i % 10}"))
    sec.figure(plots.lines(out / "load_speedup_vs_concurrency.png", series, plots.Axes(
        "concurrency (requests in flight)", "speedup (TPOT)", "Speedup vs concurrency", logx=True,
        hlines=[(1.0, "")]), "Speedup of TPOT vs concurrency per drafter (1 = no gain)."))
    groups, rows = {}, []
    marks = "o^sDvP*X"
    base = frame.drop_duplicates(["dataset", "concurrency"])
    per_gpu = frame.get("n_gpus", pd.Series(1, index=frame.index)).fillna(1).astype(float)
    groups["baseline"] = (list(base["tokens_per_s_user_baseline"]),
                          list(base["output_tok_s_baseline"] / per_gpu.loc[base.index]), "x")
    for i, (mech, grp) in enumerate(frame.groupby(MECH)):
        groups[mech] = (list(grp["tokens_per_s_user_spec"]), list(grp["output_tok_s_spec"] / per_gpu.loc[grp.index]),
                        marks[i % len(marks)])
    for label, (xs, ys, _) in groups.items():
        rows += [{"series": label, "tok/s per user": x, "tok/s per GPU": y} for x, y in zip(xs, ys)]
    sec.values["pareto"] = rows
    sec.figure(plots.pareto(out / "load_pareto.png", groups, plots.Axes(
        "output tokens/s per user", "output tokens/s per GPU", "Per-user vs per-GPU throughput"),
        "Each point is one concurrency; the line is each series' frontier (both higher is better)."))


def _random_line(sec: Section, closed: pd.DataFrame) -> None:
    """How far random-token input moves AL and speedup from real prompts at each load point."""
    if closed.empty or RANDOM not in set(closed["dataset"]) or closed["dataset"].nunique() < 2:
        return
    lines = []
    key = [MECH, D, "concurrency"]
    rand = closed[closed["dataset"] == RANDOM].groupby(key)[["al", "speedup"]].mean()
    for ds, real in closed[closed["dataset"] != RANDOM].groupby("dataset"):
        both = real.groupby(key)[["al", "speedup"]].mean().join(rand.add_suffix("_random"), how="inner")
        for (mech, d, c), r in both.iterrows():
            lines.append(f"- {mech} D = {d}, C = {int(c)}: random input moves AL {r['al']:.2f} -> {r['al_random']:.2f} "
                         f"and speedup {r['speedup']:.2f} -> {r['speedup_random']:.2f} "
                         f"(x{r['speedup_random'] / r['speedup']:.2f}) against {ds}.")
    if lines:
        sec.values["random_vs_real"] = lines
        sec.text("**Random tokens vs real prompts**:\n" + "\n".join(lines))


def _open(sec: Section, opened: pd.DataFrame) -> None:
    cols = ["dataset", MECH, D, "request_rate", "requests_s_baseline", "requests_s_spec", "goodput_baseline",
            "goodput_spec", "speedup_goodput", "speedup_goodput_ci_low", "speedup_goodput_ci_high", "stable"]
    table = opened[[c for c in cols if c in opened]].sort_values(["dataset", MECH, D, "request_rate"])
    sec.values["goodput"] = table.to_dict("records")
    sec.table(table.rename(columns={MECH: "drafter", D: "D"}),
              "Open-loop points: goodput (requests/s meeting every SLO set) vs request rate.",
              {"goodput_baseline": MEASURED, "goodput_spec": MEASURED, "speedup_goodput": MEASURED})


def build(data: ReportData, out: Path) -> Section:
    sec = Section("load", "Speculation under load")
    closed, opened = load_points(data.ok)
    if closed.empty and opened.empty:
        sec.text("No load points (`load.concurrency` / `load.request_rate`): n/a.")
        return sec
    sec.text("Each point is a cell: baseline and speculative windows at the same load, alternating and repeated until "
             "the interval is tight (docs/load.md). A point *pays* when its speedup interval is above 1, is "
             "*net-negative* when it is below 1, a *tie* otherwise; only stable points decide where a drafter stops "
             "paying.")
    if not closed.empty:
        _closed(sec, closed, out)
        _random_line(sec, closed)
    if not opened.empty:
        _open(sec, opened)
    return sec
