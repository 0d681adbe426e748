"""G5: choose the mechanism by measured speedup on the real workload, per category, context and batch.

Mechanisms, categories and context buckets are whatever the cells hold (columns, not lists).
A mechanism's score in a slice is its best measured speedup over the draft lengths measured
there; a mechanism with no cell in a slice shows n/a. A slice's winner is read off intervals: the
best mechanism wins when its interval lies above plain decoding (1.0) and excludes the runner-up's
speedup; otherwise the slice is a ``tie`` (with plain decoding, or with the runner-up), and where even
the best is slower the winner column says ``none pays`` and names the best.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import draft_cost, plots
from .. import metrics
from .common import (B, D, MEASURED, MECH, SLICE, Section, baseline_spread, config_speedups, finite, interval_text,
                     per_config, point_text, setup_cols, spec_cells)


def ranking(spec: pd.DataFrame, overall: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (setup and load point, B, mechanism): best D by the configuration's speedup (the one rule,
    ``common.config_speedups``); ranked within each (setup, B). A cell that ran a schedule is its own
    configuration, labelled ``schedule`` (never an unlabelled static D); a rank built on unstable rows says so."""
    setup = setup_cols(spec)
    cols = setup + ["B", "rank", "mechanism", "best D", "speedup", "interval", "AL", "draft ms", "evidence"]
    keys = setup + [MECH, "method", D, B]
    conf = config_speedups(spec, overall).merge(per_config(spec, ["t_draft_ms"]), on=keys, how="left")
    conf = conf.dropna(subset=["speedup"])
    if conf.empty:
        return pd.DataFrame(columns=cols)
    idx = conf.groupby(setup + [B, MECH], dropna=False)["speedup"].idxmax()
    best = conf.loc[idx.values].sort_values(setup + [B, "speedup"], ascending=[True] * (len(setup) + 1) + [False])
    best["rank"] = best.groupby(setup + [B], dropna=False).cumcount() + 1
    sched = best["schedule"].fillna("").astype(str) if "schedule" in best else pd.Series("", index=best.index)
    best["best D"] = [f"{int(d)} (schedule {t})" if t else int(d) for d, t in zip(best[D], sched)]
    best["interval"] = [f"[{lo:.3g}, {hi:.3g}]" if math.isfinite(lo) and math.isfinite(hi) else "n/a"
                        for lo, hi in zip(best["speedup_low"], best["speedup_high"])]
    best["evidence"] = [u or "stable" for u in best["unstable"].fillna("")]
    return best.rename(columns={B: "B", MECH: "mechanism", "al": "AL", "t_draft_ms": "draft ms"})[cols]


NONE_PAYS = "none pays"
TIE = "tie"


def winner(row: pd.Series, lows: pd.Series | None = None, highs: pd.Series | None = None) -> str:
    """A slice's winner from the mechanisms' best speedups (``row``) and their intervals (``lows``, ``highs``):
    the best mechanism when its interval lies above 1.0 and excludes the runner-up's speedup; ``tie: ...``
    when it includes 1.0 or the runner-up; ``none pays`` (naming the best) when its interval lies below 1.0, or
    its speedup is below 1.0 and it has no interval; ``no verdict`` when the best above 1.0 has no interval;
    ``n/a`` when nothing finite was measured."""
    row = pd.to_numeric(row, errors="coerce")
    row = row[np.isfinite(row)]
    if row.empty:
        return "n/a"
    order = row.sort_values(ascending=False)
    best, point = order.index[0], float(order.iloc[0])
    lo = float(lows[best]) if lows is not None and best in lows else math.nan
    hi = float(highs[best]) if highs is not None and best in highs else math.nan
    said = f"{best} {point:.2f}x {interval_text(lo, hi)}"
    if not (finite(lo) and finite(hi)):
        if point <= 1.0:
            return f"{NONE_PAYS} (best: {best} {point:.2f}x, slower than plain decoding)"
        return f"no verdict (best: {best} {point:.2f}x, no measured interval)"
    if hi < 1.0:
        return f"{NONE_PAYS} (best: {said}, slower than plain decoding)"
    if lo <= 1.0:
        return f"{TIE}: {said} ~ plain decoding (its interval includes 1.0)"
    if len(order) > 1 and float(order.iloc[1]) >= lo:
        runner, r_point = order.index[1], float(order.iloc[1])
        return f"{TIE}: {best} ~ {runner} ({said} includes {runner} {r_point:.2f}x)"
    return str(best)


def _slice_scores(cells: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per (slice value, mechanism, D): the speedup and its interval over the cells there (one cell: its own;
    several, e.g. the context buckets of a category: ``metrics.geomean_interval``)."""
    rows = []
    for (value, mech, depth), g in cells.groupby([by, MECH, D]):
        s = pd.to_numeric(g["speedup"], errors="coerce")
        lo = pd.to_numeric(g.get("speedup_ci_low", s * math.nan), errors="coerce")
        hi = pd.to_numeric(g.get("speedup_ci_high", s * math.nan), errors="coerce")
        if len(g) == 1:
            point, low, high = float(s.iloc[0]), float(lo.iloc[0]), float(hi.iloc[0])
        else:
            point, low, high = metrics.geomean_interval(list(s), list(lo), list(hi))
            point = point if finite(point) else metrics.geomean(list(s))
        rows.append({by: value, MECH: mech, D: depth, "speedup": point, "low": low, "high": high})
    return pd.DataFrame(rows, columns=[by, MECH, D, "speedup", "low", "high"])


def slice_pivot(spec: pd.DataFrame, batch: int, by: str, mechanisms: list[str]) -> pd.DataFrame:
    """Rows = values of ``by`` (category or context_bucket), columns = every mechanism (its best speedup over D),
    then the best mechanism's interval and the winner (``winner``: read off the intervals)."""
    cells = spec[spec[B] == batch]
    rows_all = sorted(spec[by].astype(str).unique())
    per = _slice_scores(cells.assign(**{by: cells[by].astype(str)}), by)
    if len(per):
        top = per.loc[per.dropna(subset=["speedup"]).groupby([by, MECH])["speedup"].idxmax().values]
        best = top.pivot(index=by, columns=MECH, values="speedup")
        lows, highs = top.pivot(index=by, columns=MECH, values="low"), top.pivot(index=by, columns=MECH, values="high")
    else:
        best = lows = highs = pd.DataFrame()
    best, lows, highs = (f.reindex(index=rows_all, columns=mechanisms) for f in (best, lows, highs))  # absent = n/a
    best.index.name = by
    best["best's interval"] = [interval_text(lows.loc[i, row.idxmax()], highs.loc[i, row.idxmax()])
                               if row.notna().any() else "n/a" for i, row in best[mechanisms].iterrows()]
    best["winner"] = [winner(row, lows.loc[i], highs.loc[i]) for i, row in best[mechanisms].iterrows()]
    return best.reset_index().rename(columns={by: "context bucket" if by == "context_bucket" else by})


def build(data, out: Path) -> Section:
    sec = Section("g5", "G5 - choose the mechanism by measured speedup")
    sec.text("Mechanisms ranked by **measured** decode speedup: per batch size (mean over categories), per category "
             "and per context bucket (best D in each slice). n/a = not measured there.")
    spec = spec_cells(data.ok)
    if spec.empty:
        sec.text("No speculative cell: n/a.")
        return sec
    rank = ranking(spec, data.overall)  # before the bucket relabel below: the all rows match their cells' buckets
    spec = spec.assign(context_bucket=spec["context_bucket"].fillna(""))  # rendered as the one empty-cell marker
    mechanisms = sorted(spec[MECH].unique())
    sec.values["ranking"] = rank.to_dict("records")
    sec.table(rank, "Ranking per batch size (and load point / setup where they vary).",
              {"speedup": MEASURED, "interval": MEASURED, "AL": MEASURED, "draft ms": MEASURED})
    setup = setup_cols(spec)
    for key, grp in rank.groupby(setup + ["B"], dropna=False):
        top = grp[grp["rank"] == 1].iloc[0]
        key = key if isinstance(key, tuple) else (key,)
        where = point_text(setup, key)
        note = f" ({top['evidence']})" if top["evidence"] != "stable" else ""
        if not top["speedup"] > 1.0:
            sec.text(f"At {where} no mechanism beats plain decoding (best: {top['mechanism']} D={top['best D']} at "
                     f"{top['speedup']:.2f}x{note}): none pays; the ranking orders losses.")
        elif note:
            sec.text(f"At {where} the top rank ({top['mechanism']} D={top['best D']}) rests on unstable cells{note}.")
    for name, title, part in _load_slices(spec, setup):  # one table per (setup, load point, B): never merged
        batch = int(part[B].iloc[0])
        cat = slice_pivot(part, batch, "category", mechanisms)
        sec.values.setdefault("by_category", {})[name] = cat.to_dict("records")
        sec.table(cat, f"{title}: best measured speedup per category.", {m: MEASURED for m in mechanisms})
        if spec["context_bucket"].nunique() > 1:
            buck = slice_pivot(part, batch, "context_bucket", mechanisms)
            sec.values.setdefault("by_bucket", {})[name] = buck.to_dict("records")
            sec.table(buck, f"{title}: best measured speedup per context bucket.", {m: MEASURED for m in mechanisms})
    if spec["context_bucket"].nunique() <= 1:
        sec.text("One context bucket only: no per-context ranking.")
    draft_cost.add_to(sec, spec, out)
    sec.figure(_pareto(data.ok, spec, out, sec, data.overall))
    sec.figure(_per_position(spec, out))
    sec.figure(_al_by_category(spec, mechanisms, out))
    return sec


def _load_slices(spec: pd.DataFrame, setup: list[str]):
    """(key, title, cells) per (setup and load point, B); the key (report.json) is B alone when nothing else varies."""
    for key, part in spec.groupby(setup + [B], dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        title = point_text(setup, key)
        yield (title if setup else int(key[-1])), title, part


def _pareto(ok: pd.DataFrame, spec: pd.DataFrame, out: Path, sec: Section | None = None,
            overall: pd.DataFrame | None = None):
    """Each configuration against its cells' own paired baselines: x = the paired TPOT speedup (per-user speed
    relative to plain decoding; the configuration's speedup by the one rule, ``config_speedups``), y = the
    throughput speedup (``speedup_throughput`` where measured, else the cell's tokens/s per device over its own
    baseline's); plain decoding is (1, 1). Absolute tokens/s are not
    drawn: cells measured at different times see different machine states (``common.baseline_spread``)."""
    def ratio(spec_col: str, base_col: str) -> pd.Series:
        num, den = (pd.to_numeric(spec.get(c, spec["speedup"] * math.nan), errors="coerce") for c in (spec_col, base_col))
        return num / den.where(den > 0)

    through = pd.to_numeric(spec.get("speedup_throughput", spec["speedup"] * math.nan), errors="coerce")
    paired = spec.assign(speedup_pareto_user=pd.to_numeric(spec["speedup"], errors="coerce"),
                         speedup_pareto_throughput=through.where(through.map(finite),
                                                                 ratio("tokens_per_s_per_gpu_spec",
                                                                       "tokens_per_s_per_gpu_baseline")))
    conf = per_config(paired, ["speedup_pareto_user", "speedup_pareto_throughput"])
    setup = [c for c in setup_cols(paired) if c in conf]
    keys = setup + [MECH, "method", D, B]
    one = config_speedups(spec, overall)[keys + ["speedup"]]  # x: the configuration's speedup by the one rule
    conf = conf.merge(one, on=keys, how="left")
    conf["speedup_pareto_user"] = conf["speedup"].where(conf["speedup"].map(finite), conf["speedup_pareto_user"])
    groups = {"no speculation (each cell's own baseline)": ([1.0], [1.0], "s", ["1x"])}
    markers, rows = "o^vD<>phx*", []
    for i, (mech, grp) in enumerate(conf.groupby(MECH)):
        names = [point_text(setup, tuple(r[c] for c in setup) + (r[B],)).replace("B = ", "B") for _, r in grp.iterrows()]
        names = [f"D{int(d)}/{n}" for d, n in zip(grp[D], names)]
        groups[f"{mech} (all D)"] = (list(grp["speedup_pareto_user"]), list(grp["speedup_pareto_throughput"]),
                                     markers[i % len(markers)], names)
        rows += [{"mechanism": mech, "point": n, "per-user speedup": x, "throughput speedup": y}
                 for n, x, y in zip(names, grp["speedup_pareto_user"], grp["speedup_pareto_throughput"])]
    spread = baseline_spread(spec, [c for c in (*SLICE, B, *setup) if c in spec])  # the same prompts, other cells
    if sec is not None:
        sec.values["pareto"] = rows
        sec.values["pareto_baseline_spread"] = spread
    note = ("Both axes are paired: each cell against its own baseline, so (1, 1) is plain decoding. "
            + (spread[0].upper() + spread[1:] + ", so they are not drawn." if spread else ""))
    return plots.pareto(out / "g5_pareto.png", groups, plots.Axes(
        "per-user speedup (paired TPOT, x plain decoding)", "throughput speedup (paired, x plain decoding)",
        "G5: per-user speed vs throughput, each against its own baseline (measured)",
        hlines=[(1.0, "")], vlines=[(1.0, "")], note=note),
        "Pareto view on paired axes: each point a (mechanism, D, load point or B) configuration against its cells' "
        "own baselines, labelled D/B (or D/C, D/rate); lines are each group's frontier; up and right is better. "
        + (spread[0].upper() + spread[1:] + "." if spread else ""))


def _mean_lists(lists) -> list[float]:
    lists = [list(x) for x in lists if isinstance(x, (list, tuple, np.ndarray)) and len(x)]
    if not lists:
        return []
    width = max(len(x) for x in lists)
    arr = np.full((len(lists), width), np.nan)
    for i, x in enumerate(lists):
        arr[i, : len(x)] = [v if v is not None else np.nan for v in x]
    import warnings

    with warnings.catch_warnings():  # a position no cell reached: NaN ("Mean of empty slice" is a warning, not an errstate)
        warnings.simplefilter("ignore", RuntimeWarning)
        return [float(v) if not np.isnan(v) else math.nan for v in np.nanmean(arr, axis=0)]


def _per_position(spec: pd.DataFrame, out: Path):
    b_min = spec[B].min()
    series = []
    for i, (mech, grp) in enumerate(spec[spec[B] == b_min].groupby(MECH)):
        d_max = grp[D].max()
        cells = grp[grp[D] == d_max]
        uncond, cond = _mean_lists(cells["accepted_per_pos"]), _mean_lists(cells["accepted_per_pos_cond"])
        c = f"C{i % 10}"
        series.append(plots.Series(f"{mech} D={d_max}: P(first k accepted)", list(range(1, len(uncond) + 1)), uncond,
                                   "-o", color=c))
        series.append(plots.Series(f"{mech} D={d_max}: P(k-th | first k-1)", list(range(1, len(cond) + 1)), cond,
                                   "--s", color=c))
    return plots.lines(out / "g5_per_position.png", series, plots.Axes(
        "draft position k", "acceptance probability", f"G5: per-position acceptance at B = {b_min} (measured)",
        integer_x=True),
        "Per-position acceptance (mean over categories) of each mechanism at its largest measured D.")


def _al_by_category(spec: pd.DataFrame, mechanisms: list[str], out: Path):
    b_min = spec[B].min()
    cells = spec[spec[B] == b_min]
    categories = sorted(spec["category"].astype(str).unique())
    groups = {}
    for mech in mechanisms:
        mine = cells[cells[MECH] == mech]
        if mine.empty:
            groups[f"{mech}"] = [math.nan] * len(categories)
            continue
        d_max = mine[D].max()
        al = mine[mine[D] == d_max].groupby("category")["al"].mean()
        groups[f"{mech} D={d_max}"] = [float(al.get(c, math.nan)) for c in categories]
    return plots.bars(out / "g5_al_by_category.png", categories, groups, plots.Axes(
        "category", "AL (bonus token included)", f"G5: AL by category at B = {b_min} (measured)"),
        "AL per prompt category, each mechanism at its largest measured D.")
