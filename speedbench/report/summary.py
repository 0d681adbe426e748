"""Summary: per-configuration AL, speedup, predicted vs measured, greedy match; what to pick."""
from __future__ import annotations

import math

import pandas as pd

from .. import metrics
from ..backends.registry import simulated_backends
from .common import (B, D, DERIVED, MEASURED, MECH, Section, best_by, config_speedups, finite, per_config, same_setup,
                     setup_cols, spec_cells, stable_cells)
from . import nodes
from .. import evidence
from ..results.load import ReportData

VALUES = ["al", "al_speed_bench", "speedup_predicted", "greedy_match_rate", "degenerate_frac"]
FEW_REQUESTS = 10
PREDICTION_TOLERANCE = 0.20


def config_table(spec: pd.DataFrame, overall: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per configuration: speedup, interval, AL and stability by the one rule (``common.config_speedups``:
    its derived all row where it has one); greedy match and the rest as means over its cells, predicted
    speedup as a geometric mean (ratios average on the log scale)."""
    for c in VALUES:  # results written before a column existed: n/a
        if c not in spec:
            spec = spec.assign(**{c: float("nan")})
    keys = setup_cols(spec) + [MECH, "method", D, B]
    rest = [c for c in VALUES if c not in ("al", "al_speed_bench")]
    conf = per_config(spec, rest).merge(config_speedups(spec, overall), on=keys, how="left")
    pred = pd.to_numeric(spec["speedup_predicted"], errors="coerce")
    geo = pred.groupby([spec[k] for k in keys], dropna=False).agg(metrics.geomean).reset_index()
    conf = conf.drop(columns=["speedup_predicted"]).merge(geo, on=keys, how="left")
    counts = spec.groupby(keys, dropna=False).agg(cells=("cell_id", "size"), requests=("n_requests", "sum")).reset_index()
    conf = conf.merge(counts, on=keys, how="left")
    conf["pred_over_meas"] = conf["speedup_predicted"] / conf["speedup"]
    conf["interval"] = [interval(lo, hi) for lo, hi in zip(conf["speedup_low"], conf["speedup_high"])]
    return conf


def interval(lo, hi) -> str:
    return f"[{lo:.3g}, {hi:.3g}]" if finite(lo) and finite(hi) else "n/a"


def build(data: ReportData) -> Section:
    sec = Section("summary", "Summary")
    cells, ok = data.cells, data.ok
    failed = data.failed
    sec.text(
        f"{len(cells)} cells from {len(data.roots)} results folder(s) "
        f"({', '.join(str(r) for r in data.roots)}); {len(ok)} ok, {len(failed)} failed"
        + (f", {len(data.overall)} derived overall (category=all) rows" if len(data.overall) else "") + "; "
        f"backends: {', '.join(data.backends) or 'n/a'}; devices: {', '.join(data.device_names) or 'n/a'}."
    )
    simulated = sorted(set(simulated_backends()) & set(data.backends))
    if simulated:
        sec.text(
            "**Synthetic backend.** Cells from `backend=synthetic` come from a seeded model of acceptance and "
            "step time, not from an engine: their 'measured' numbers are simulated. Use them to check the "
            "pipeline, never to choose a drafter."
        )
    sec.text(
        "Labels: *measured* = read from the cells (matched baseline/speculative runs); *modelled* = the cost "
        "model or a formula; *n/a* = not measured (a gap, never a zero). A configuration's value is the mean over "
        "its derived `all` row (categories pooled by their requests; the console's `all` row) where it has one, "
        "else the mean over its cells (prompt categories x context buckets): AL as an arithmetic mean, speedups "
        "as a geometric mean with a 95% interval (column *from*). A load point (concurrency, request rate) is part "
        "of a configuration. AL counts the bonus token. Each cell's speedup is the geometric "
        "mean over its requests of the median paired TPOT ratio over repeats (baseline and speculative passes "
        "paired: taking turns at iteration boundaries on the reference engine, HF generate and offline vLLM's CPU build, else interleaved ABBA; each cell's "
        "extra.protocol.interleave says which); its interval is a bootstrap over requests and repeats. Two configurations whose "
        "measurement-noise intervals (prompts held fixed) overlap are a tie. Two AL conventions side by side: *AL* = 1 + accepted / drafts pooled over a cell's "
        "requests (vLLM's counters); *SPEED-Bench AL* = the SPEED-Bench tool's (tokens per streamed chunk, prefill "
        "chunk included, stop token off the last chunk, mean per request, then over requests). Section *Acceptance "
        "on each convention* has all four and the overall (all categories) rows."
    )
    spec = spec_cells(ok)
    if spec.empty:
        sec.text("No speculative cell finished: nothing to summarise (n/a).")
        _failed(sec, failed)
        return sec
    conf = config_table(spec, data.overall)
    show = conf[setup_cols(spec) + [MECH, D, B, "cells", "stable", "requests", "al", "al_speed_bench", "speedup", "interval",
                                    "source", "speedup_predicted", "pred_over_meas", "greedy_match_rate"]]
    sec.table(
        show.rename(columns={MECH: "mechanism", D: "D", B: "B", "al": "AL", "al_speed_bench": "SPEED-Bench AL",
                             "speedup": "speedup (geo. mean)",
                             "interval": "95% interval", "stable": "stable cells", "source": "from",
                             "speedup_predicted": "predicted speedup", "pred_over_meas": "predicted / measured",
                             "greedy_match": "greedy match", "greedy_match_rate": "greedy match"}),
        "Per configuration (over categories and context buckets).",
        {"AL": MEASURED, "SPEED-Bench AL": MEASURED, "speedup (geo. mean)": MEASURED, "95% interval": MEASURED, "predicted speedup": DERIVED,
         "predicted / measured": DERIVED, "greedy match": MEASURED},
    )
    picks = recommend(spec, conf, bool(simulated))
    sec.values["recommendation"] = picks.to_dict("records")
    sec.values["configs"] = conf.to_dict("records")
    sec.text("### What to pick\n\nBest configuration per batch size (and load point) by **measured** speedup (the "
             "configuration's value above: its `all` row where it has one), with the caveats that apply; a pick on "
             "unstable cells says so, and one without a measured, finite interval is *no verdict*. When the runner-up's interval overlaps the best one's, the "
             "pick is a **tie** and names both; when the best one's interval includes 1 it is a tie with plain decoding. A "
             "pick of `none` means every measured configuration was slower than plain decoding (interval below 1). "
             "Unstable counts count cells.")
    sec.table(picks, "", {"speedup": MEASURED, "interval": MEASURED, "AL": MEASURED, "predicted": DERIVED})
    spec = spec.assign(interval=[interval(lo, hi) for lo, hi in zip(
        spec.get("speedup_ci_low", spec["speedup"] * math.nan), spec.get("speedup_ci_high", spec["speedup"] * math.nan))])
    cols = [c for c in setup_cols(spec) + ["category", "context_bucket", MECH, D, B, "n_requests", "al", "al_speed_bench",
                                            "speedup", "interval", "n_repeats", "stable", "speedup_predicted",
                                            "greedy_match_rate", "degenerate_frac"] if c in spec]
    sec.text(f"### All cells ({len(spec)})")
    sec.table(spec[cols].sort_values([MECH, D, B, "category"]).rename(columns={
        "context_bucket": "context bucket", MECH: "mechanism", D: "D", B: "B", "n_requests": "n", "al": "AL",
        "interval": "95% interval", "n_repeats": "repeats", "al_speed_bench": "SPEED-Bench AL",
        "degenerate_frac": "degenerate",
        "speedup_predicted": "predicted speedup", "greedy_match_rate": "greedy match"}), "",
        {"AL": MEASURED, "SPEED-Bench AL": MEASURED, "speedup": MEASURED, "predicted speedup": DERIVED,
         "greedy match": MEASURED})
    _unstable(sec, spec)
    nodes.add(sec, cells)
    _failed(sec, failed)
    return sec


def _unstable(sec: Section, spec: pd.DataFrame) -> None:
    _, unstable = stable_cells(spec)
    if unstable.empty:
        return
    cols = [c for c in (MECH, D, B, "category", "context_bucket", "unstable_reason") if c in unstable]
    sec.text(f"### Unstable cells ({len(unstable)} of {len(spec)})\n\nTheir speedups are shown with their intervals, "
             "but no guideline verdict (G1, G4) is drawn from them.")
    sec.table(unstable[cols].rename(columns={MECH: "mechanism", D: "D", B: "B", "unstable_reason": "why"}))


def recommend(spec: pd.DataFrame, conf: pd.DataFrame, synthetic: bool) -> pd.DataFrame:
    setup = setup_cols(spec)
    best = best_by(conf, setup + [B], "speedup")
    rows = []
    for _, r in best.iterrows():
        same_b = same_setup(conf[conf[B] == r[B]], r, setup)
        alt = same_b[(same_b[MECH] != r[MECH]) | (same_b[D] != r[D])].dropna(subset=["speedup"])
        alt = alt.sort_values("speedup", ascending=False)
        runner = f"{alt.iloc[0][MECH]} D={int(alt.iloc[0][D])} ({alt.iloc[0]['speedup']:.2f}x)" if len(alt) else "n/a"
        best_iv = (r.get("speedup_low", math.nan), r.get("speedup_high", math.nan))
        # configurations ran on the same prompts: a tie is measurement noise alone (prompts held fixed)
        noise_iv = (r.get("noise_low", math.nan), r.get("noise_high", math.nan))
        ties = [a for _, a in alt.iterrows() if metrics.intervals_overlap(noise_iv, (a["noise_low"], a["noise_high"]))]
        measured = evidence.measured_interval(*best_iv)  # a verdict needs a measured, finite interval
        beats_plain = measured is not None and measured[0] > 1
        if measured is None:
            pick = f"no verdict ({r[MECH]} D={int(r[D])}: {evidence.NO_INTERVAL})"
        elif not beats_plain:
            pick = ("none (plain decoding)" if not measured[1] >= 1 else
                    f"tie: {r[MECH]} D={int(r[D])} ~ plain decoding (its interval includes 1)")
        elif ties:
            pick = f"tie: {r[MECH]} D={int(r[D])} ~ " + ", ".join(f"{a[MECH]} D={int(a[D])}" for a in ties[:3])
        else:
            pick = f"{r[MECH]} D={int(r[D])}"
        if r.get("unstable"):
            pick += f" ({r['unstable']})"  # a pick built on unstable cells says so
        rows.append({**{c: r[c] for c in setup}, "B": int(r[B]), "pick": pick, "speedup": r["speedup"],
                     "interval": interval(*best_iv), "AL": r["al"],
                     "predicted": r["speedup_predicted"], "runner-up": runner,
                     "caveats": "; ".join(caveats(same_setup(spec, r, setup), same_setup(conf, r, setup), r, synthetic))
                     or "none"})
    return pd.DataFrame(rows)


def caveats(spec: pd.DataFrame, conf: pd.DataFrame, r: pd.Series, synthetic: bool) -> list[str]:
    out = []
    if not r["speedup"] > 1:
        out.append(f"best measured speedup {r['speedup']:.2f}x <= 1: speculation does not pay here")
    depths = sorted(conf[(conf[MECH] == r[MECH]) & (conf[B] == r[B])][D].unique())
    if len(depths) > 1 and r[D] == depths[-1]:
        out.append(f"D={int(r[D])} is the largest D measured for {r[MECH]}: measure larger D")
    elif len(depths) > 1 and r[D] == depths[0] and depths[0] > 1:
        out.append(f"D={int(r[D])} is the smallest D measured: measure smaller D")
    ratio = r["speedup_predicted"] / r["speedup"]
    if finite(ratio) and abs(ratio - 1) > PREDICTION_TOLERANCE:
        out.append(f"predicted speedup off by {ratio - 1:+.0%}: time outside draft/verify is large")
    if finite(r.get("degenerate_frac")) and r["degenerate_frac"] > 0:
        out.append(f"{r['degenerate_frac']:.0%} of requests (mean over cells) end in a repetition loop: "
                   "AL and speedup overstate real text")
    if finite(r["greedy_match_rate"]) and r["greedy_match_rate"] < 1:
        out.append(f"greedy output differs from the baseline in {1 - r['greedy_match_rate']:.0%} of requests")
    cells = spec[(spec[B] == r[B])]
    winners = best_by(cells, ["category", "context_bucket"], "speedup")
    differ = winners[(winners[MECH] != r[MECH]) | (winners[D] != r[D])]
    if len(differ):
        out.append("other winners in " + ", ".join(
            f"{w['category']}{'/' + w['context_bucket'] if w['context_bucket'] else ''}: {w[MECH]} D={int(w[D])}"
            for _, w in differ.iterrows()))
    n_min = spec[(spec[MECH] == r[MECH]) & (spec[D] == r[D]) & (spec[B] == r[B])]["n_requests"].min()
    if finite(n_min) and n_min < FEW_REQUESTS:
        out.append(f"only {int(n_min)} request(s) in a cell: noisy")
    if synthetic:
        out.append("synthetic backend")
    return out


def _failed(sec: Section, failed: pd.DataFrame) -> None:
    if failed.empty:
        return
    cols = [c for c in (MECH, D, B, "category", "context_bucket", "error") if c in failed]
    sec.text(f"### Failed cells ({len(failed)})\n\nThese cells have no numbers; they show as n/a everywhere.")
    sec.table(failed[cols].rename(columns={MECH: "mechanism", D: "D", B: "B"}))
