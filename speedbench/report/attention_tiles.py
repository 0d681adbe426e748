"""G3: above D0, prefer D with G(1+D) a multiple of 128 (attention runs in 128-row tiles).

Lists the tile-aligned draft lengths for the target's G, the tile fill of every measured D, the
modelled staircase, and the measured staircase when ``microbench attention`` results are present.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..modelling import costmodel as cm
from . import plots
from .common import D, MEASURED, MODELLED, Section, contexts, finite, spec_cells
from ..results.load import ReportData
from .modelling import ModelContext

TILE = 128


def tile_fill(group: int, depth: int) -> dict:
    rows = group * (1 + depth)
    tiles = math.ceil(rows / TILE)
    return {"G(1+D)": rows, "tiles": tiles, "last tile fill": (rows - (tiles - 1) * TILE) / TILE,
            "multiple of 128": rows % TILE == 0}


def staircase(att: pd.DataFrame) -> pd.DataFrame:
    """Per tile count: the measured runtime range and the step from the previous tile."""
    grp = att.groupby("tiles").agg(q_min=("queries_per_kv_head", "min"), q_max=("queries_per_kv_head", "max"),
                                   t_min=("time_s", "min"), t_max=("time_s", "max"), t_mean=("time_s", "mean"))
    grp["within-tile spread"] = grp["t_max"] / grp["t_min"] - 1
    grp["step from previous tile"] = grp["t_mean"] / grp["t_mean"].shift(1) - 1
    grp = grp.reset_index()
    grp["G(1+D) range"] = grp["q_min"].astype(int).astype(str) + "-" + grp["q_max"].astype(int).astype(str)
    grp["mean time (us)"] = grp["t_mean"] * 1e6
    return grp[["tiles", "G(1+D) range", "mean time (us)", "within-tile spread", "step from previous tile"]]


def build(data: ReportData, ctx: ModelContext, out: Path) -> Section:
    sec = Section("g3", "G3 - above D0, prefer D with G(1+D) a multiple of 128")
    sec.text("Attention runtime rises in steps at each 128-row tile boundary; a partly filled last tile costs about "
             "as much as a full one. Tile arithmetic follows from G (the target's config).")
    spec = spec_cells(data.ok)
    for t in ctx.targets:
        if t.shape is None:
            sec.text(f"Target {t.name}: n/a ({t.error}).")
            continue
        g = t.shape.group
        d0 = cm.d0(g)
        aligned = cm.tile_aligned_depths(g, 4)
        sec.values.setdefault("targets", {})[t.name] = {"G": g, "D0": d0, "aligned": aligned}
        sec.text(f"Target **{t.name}**, G = {g}: D0 = {d0 if d0 is not None else 'n/a'}; the next draft lengths with "
                 f"G(1+D) a multiple of 128 are **{', '.join(map(str, aligned))}**.")
        ds = sorted(int(d) for d in spec[spec["target"] == t.name][D].unique()) if not spec.empty else []
        if ds:
            frame = pd.DataFrame([{"D": d, **tile_fill(g, d), "above D0": d0 is not None and d > d0} for d in ds])
            sec.table(frame, "Tile fill of the measured draft lengths (arithmetic, exact).")
        ctx_tok = contexts(data.ok)["context_tokens"].mean() if not data.ok.empty else math.nan
        context = float(ctx_tok) if finite(ctx_tok) else 4096.0
        top = max(aligned[1] if len(aligned) > 1 else 8, max(ds, default=0))
        depths = list(range(0, top + 1))
        model_t = [cm.attention_time(t.shape, 1, d, context, ctx.hw) for d in depths]
        series = [plots.Series(f"{t.name} (modelled, context {context:.0f}, {ctx.hw.name})",
                               [g * (1 + d) for d in depths], [x / model_t[0] for x in model_t], "--", MODELLED)]
        att = data.microbench.get("attention")
        if att is not None and not att.empty:
            series.append(plots.Series(
                f"SDPA microbench (measured, context {int(att['context'].iloc[0])}, {att['device'].iloc[0]})",
                list(att["queries_per_kv_head"]), list(att["relative_time"]), "-o"))
        vlines = [(TILE * k, "128-row tile boundary" if k == 1 else "") for k in range(1, 1 + math.ceil(g * (1 + top) / TILE))]
        sec.figure(plots.lines(out / f"g3_attention_staircase_{_safe(t.name)}.png", series, plots.Axes(
            "queries per KV head G(1+D)", "runtime relative to the smallest point",
            "G3: decode attention vs G(1+D)", vlines=vlines),
            "Attention runtime vs G(1+D): modelled and measured (microbench)." if len(series) > 1
            else "Attention runtime vs G(1+D): modelled only (no attention microbenchmark in these results)."))
    att = data.microbench.get("attention")
    if att is None or att.empty:
        sec.text("Attention microbenchmark: n/a (run `speedbench microbench attention --results-dir RESULTS_DIR`); "
                 "the staircase above is modelled only.")
    else:
        stairs = staircase(att)
        sec.values["staircase"] = stairs.to_dict("records")
        sec.text(f"Measured staircase (`microbench attention`, {att['device'].iloc[0]}, {att['dtype'].iloc[0]}, "
                 f"context {int(att['context'].iloc[0])}):")
        sec.table(stairs, "", {"mean time (us)": MEASURED, "within-tile spread": MEASURED, "step from previous tile": MEASURED})
    return sec


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
