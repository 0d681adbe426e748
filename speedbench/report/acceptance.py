"""Acceptance on each convention (docs/acceptance.md): the four ALs side by side, drafts the output
did not keep, degenerate output, and AL along the output and per turn. Every number is read from
the cells (``metrics.acceptance`` computed it); nothing is recomputed here."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import plots
from .common import B, D, MEASURED, MECH, Section, finite, setup_cols, spec_cells
from ..results.load import ReportData

CONVENTIONS = [
    ("al", "AL (pooled)", "1 + accepted / drafts over the requests pooled (vLLM's counters); accepted drafts "
     "count also where a stop token or max_new_tokens cut the step"),
    ("al_request_mean", "AL (mean over requests)", "each request's 1 + accepted / drafts, then the mean over requests"),
    ("al_emitted", "AL (emitted tokens)", "pooled kept tokens per draft: a step cut by a stop token or "
     "max_new_tokens counts only what the output kept"),
    ("al_speed_bench", "AL (SPEED-Bench tool)", "the SPEED-Bench tool's: tokens per streamed chunk (prefill chunk "
     "included, the stop token taken off the last one, steps without a proposal count), mean per request, then "
     "the mean over requests"),
]
COLS = [c for c, _, _ in CONVENTIONS]


def _lists(v) -> list[float]:
    if isinstance(v, (list, tuple, np.ndarray)):
        return [float(x) if x is not None else math.nan for x in v]
    return []


def pooled_along(cells: pd.DataFrame) -> tuple[list[float], list[float]]:
    """AL per output window over several cells: their drafts pooled (AL - 1 weighted by drafts)."""
    acc: dict[int, list[float]] = {}
    for al, n in zip(cells["al_by_position"], cells["drafts_by_position"]):
        for k, (a, m) in enumerate(zip(_lists(al), _lists(n))):
            if finite(a) and m > 0:
                s = acc.setdefault(k, [0.0, 0.0])
                s[0], s[1] = s[0] + (a - 1) * m, s[1] + m
    ks = sorted(acc)
    return [float(k) for k in ks], [1 + acc[k][0] / acc[k][1] for k in ks]


def build(data: ReportData, out: Path) -> Section:
    sec = Section("acceptance", "Acceptance on each convention")
    spec = spec_cells(data.ok)
    if spec.empty or "al_speed_bench" not in spec:
        sec.text("No speculative cell with the acceptance conventions (results written before they existed): n/a.")
        return sec
    sec.text("The same engine steps counted four ways (every definition in `speedbench/metrics/acceptance.py`; "
             "docs/acceptance.md explains where the conventions part ways):\n\n"
             + "\n".join(f"- **{label}** (`{col}`): {text}." for col, label, text in CONVENTIONS))
    overall = spec_cells(data.overall)
    keys = setup_cols(spec) + [MECH, D, B]
    if not overall.empty:
        rows = overall
        caption = ("Per configuration, all categories pooled (the derived `category=all` rows: every convention "
                   "computed on the union of the category cells' requests).")
    else:
        rows = spec.groupby(keys, dropna=False)[COLS + ["degenerate_frac"]].mean().reset_index()
        caption = "Per configuration, mean over its cells (no derived overall row in these results)."
    show = rows[[c for c in keys + ["context_bucket"] + COLS + ["degenerate_frac", "n_accepted", "n_accepted_kept"]
                 if c in rows]].copy()
    if {"n_accepted", "n_accepted_kept"} <= set(show):
        show["accepted, not kept"] = [a - k if finite(a) and finite(k) and k >= 0 else math.nan
                                      for a, k in zip(show["n_accepted"], show["n_accepted_kept"])]
    names = {c: label for c, label, _ in CONVENTIONS} | {MECH: "mechanism", D: "D", B: "B",
                                                         "context_bucket": "context bucket",
                                                         "degenerate_frac": "degenerate requests",
                                                         "n_accepted": "accepted (engine)",
                                                         "n_accepted_kept": "accepted, kept"}
    sec.table(show.rename(columns=names), caption, {names[c]: MEASURED for c in COLS})
    sec.values["overall"] = show.to_dict("records")
    cells = spec[keys + ["category", "context_bucket"] + COLS + ["degenerate_frac"]].sort_values(keys + ["category"])
    cells = cells.assign(gap=cells["al"] - cells["al_speed_bench"])
    sec.text("### Per cell\n\n`gap` = AL (pooled) - AL (SPEED-Bench tool): positive where long or truncated "
             "requests accept more than short ones, or where the last step's accepted drafts were cut; the tool's "
             "prefill chunk (1 token) pulls its number down, averaging over requests weighs short answers up.")
    sec.table(cells.rename(columns=names), "", {names[c]: MEASURED for c in COLS})
    flagged = spec[spec["degenerate"].map(lambda v: bool(v) and v == v)] if "degenerate" in spec else spec.iloc[:0]
    if len(flagged):
        sec.text(f"**Degenerate output in {len(flagged)} cell(s).** Their replies end in a repetition loop (rule: "
                 "docs/acceptance.md); a loop is easy to draft, so their AL and speedup overstate real text: "
                 + ", ".join(f"{r[MECH]} D={int(r[D])} B={int(r[B])} {r['category']} "
                             f"({r['degenerate_frac']:.0%} of requests)" for _, r in flagged.iterrows()) + ".")
    sec.figure(_along(spec, overall, keys, out))
    sec.figure(_by_turn(spec, overall, keys, out))
    return sec


def _source(spec: pd.DataFrame, overall: pd.DataFrame, keys: list[str]):
    """Per configuration: its overall row if there is one, else its cells (pooled by drafts)."""
    if not overall.empty:
        for key, grp in overall.groupby(keys, dropna=False):
            yield key, grp
    else:
        for key, grp in spec.groupby(keys, dropna=False):
            yield key, grp


def _label(key) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    return " ".join(str(p) for p in parts[:-3]) + f" {parts[-3]} D={parts[-2]} B={parts[-1]}".strip()


def _along(spec: pd.DataFrame, overall: pd.DataFrame, keys: list[str], out: Path):
    if "al_by_position" not in spec:
        return None
    window = int(pd.to_numeric(spec["al_window"], errors="coerce").max() or 0)
    series = []
    for i, (key, grp) in enumerate(_source(spec, overall, keys)):
        xs, ys = pooled_along(grp)
        if xs:
            series.append(plots.Series(_label(key), [x * window for x in xs], ys, "-o", color=f"C{i % 10}"))
    if not series or window <= 0:
        return None
    return plots.lines(out / "acceptance_along_output.png", series, plots.Axes(
        "output position (first token of the draft, within the turn's reply)", "AL (pooled, bonus token included)",
        "AL along the output (measured)"),
        f"AL of the drafts whose first token falls in each window of {window} output positions "
        "(`acceptance.window`), all categories pooled.")


def _by_turn(spec: pd.DataFrame, overall: pd.DataFrame, keys: list[str], out: Path):
    if "al_by_turn" not in spec or not any(len(_lists(v)) > 1 for v in spec["al_by_turn"]):
        return None
    series = []
    for i, (key, grp) in enumerate(_source(spec, overall, keys)):
        turns = [_lists(v) for v in grp["al_by_turn"]]
        width = max((len(t) for t in turns), default=0)
        ys = [float(np.nanmean([t[k] for t in turns if len(t) > k and finite(t[k])] or [math.nan]))
              for k in range(width)]
        series.append(plots.Series(_label(key), [float(k + 1) for k in range(width)], ys, "-o", color=f"C{i % 10}"))
    return plots.lines(out / "acceptance_by_turn.png", series, plots.Axes(
        "user turn", "AL (pooled)", "AL per turn of multi-turn requests (measured)", integer_x=True),
        "AL per user turn (single-turn requests count in turn 1 only).")
