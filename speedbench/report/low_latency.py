"""G4: at the low-latency end (B = 1), raise D only while AL pays for the draft cost.

rho = per-draft-token time / target step time = (t_draft_ms / D) / t_verify_ms_baseline, from
the cells at B = 1 (measured; median over the mechanism's cells). The modelled low-latency
speedup AL/(1 + rho D) uses the measured AL(D); the D maximising it is where the marginal AL
stops paying for the draft cost. The measured speedup stands beside it.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plots
from .common import (B, D, DERIVED, MEASURED, MECH, Section, config_speedups, finite, per_config, setup_cols, spec_cells,
                     stable_cells)
from ..results.load import ReportData

LOW_B = 1


def rho_per_mechanism(cells: pd.DataFrame) -> pd.Series:
    """Median over a mechanism's B=1 cells of (t_draft_ms / D) / t_verify_ms_baseline."""
    rho = (cells["t_draft_ms"] / cells[D]) / cells["t_verify_ms_baseline"]
    return rho.groupby(cells[MECH]).median()


def curves(cells: pd.DataFrame) -> pd.DataFrame:
    """Per (mechanism, D) at B=1: AL, measured speedup, rho, AL/(1+rho D)."""
    conf = per_config(cells, ["al", "speedup"])
    keys = [k for k in conf.columns if k not in ("al", "speedup")]
    interval = config_speedups(cells)[keys + ["speedup_low", "speedup_high"]]  # drawn as the speedup's error bars
    conf = conf.merge(interval, on=keys, how="left")
    rho = rho_per_mechanism(cells)
    conf["rho"] = conf[MECH].map(rho)
    conf["al_over_cost"] = conf["al"] / (1 + conf["rho"] * conf[D])
    return conf


def surface_cells(spec: pd.DataFrame) -> pd.DataFrame:
    """Cost-surface cells: acceptance forced to ``synthetic_al`` (real draft and verify compute; not lossless)."""
    if spec.empty or "synthetic_al" not in spec:
        return spec.iloc[0:0]
    return spec[spec["synthetic_al"].notna()]


def surface_table(sec: Section, surface: pd.DataFrame) -> None:
    """Speedup against AL per (D, B) from the engine's synthetic-acceptance surface."""
    keys = setup_cols(surface) + [MECH, D, B, "synthetic_al"]
    cols = ["al", "speedup", "speedup_predicted", "t_draft_ms", "t_verify_ms", "t_verify_ms_baseline"]
    table = surface.groupby(keys, dropna=False)[cols].median().reset_index().sort_values([D, B, "synthetic_al"])
    sec.values["surface"] = table.to_dict("records")
    sec.text("**Synthetic acceptance (cost surface)**: the engine ran its real draft and verification forwards "
             "with the accept decision forced to a mean AL, so these cells map speedup against AL for each D and B; "
             "their outputs are not the target's (no losslessness claim) and they are left out of the mechanism "
             "rows below.")
    sec.table(table.rename(columns={MECH: "mechanism", D: "D", B: "B", "synthetic_al": "forced AL", "al": "measured AL",
                                    "speedup_predicted": "predicted speedup"}),
              "Speedup vs AL (synthetic acceptance; all B).",
              {"measured AL": MEASURED, "speedup": MEASURED, "predicted speedup": DERIVED})


def _per_mechanism(conf: pd.DataFrame) -> list[dict]:
    """Per mechanism: rho, the D where AL/(1+rho D) peaks and the measured best D (a best D needs at least
    two draft lengths to choose between; one D measured is no trade-off)."""
    rows = []
    for mech, grp in conf.groupby(MECH):
        grp = grp.sort_values(D)
        have = grp.dropna(subset=["al_over_cost"])
        meas = grp.dropna(subset=["speedup"])
        d_star = int(have.loc[have["al_over_cost"].idxmax(), D]) if have[D].nunique() >= 2 else math.nan
        d_meas = int(meas.loc[meas["speedup"].idxmax(), D]) if meas[D].nunique() >= 2 else math.nan
        rows.append({"mechanism": mech, "rho": grp["rho"].iloc[0],
                     "D where AL stops paying (max AL/(1+rho D))": d_star,
                     "AL/(1+rho D) there": have["al_over_cost"].max() if len(have) else math.nan,
                     "measured best D": d_meas, "measured speedup there": meas["speedup"].max() if len(meas) else math.nan})
    return rows


def _verdict_lines(rows: list[dict], conf: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """One line per mechanism: where the model and the measurement put the best D, and why they differ."""
    growth = (cells["t_verify_ms"] / cells["t_verify_ms_baseline"]).groupby(cells[D]).median()
    lines = []
    for r in rows:
        d_star, d_meas = r["D where AL stops paying (max AL/(1+rho D))"], r["measured best D"]
        if conf[conf[MECH] == r["mechanism"]][D].nunique() < 2:
            only = int(conf[conf[MECH] == r["mechanism"]][D].iloc[0])
            lines.append(f"- {r['mechanism']}: only D = {only} measured at B = {LOW_B}; no best D to read "
                         "(measure two or more draft lengths, e.g. `drafter.num_speculative_tokens=2,4,6 -m`).")
            continue
        if not (finite(d_star) and finite(d_meas)):
            continue
        if d_star == d_meas:
            why = "they agree"
        else:
            g = growth.get(max(d_star, d_meas), math.nan)
            why = ("they differ: AL/(1+rho D) assumes verification does not grow with D, but T_verif(1+D)/T_verif(1) = "
                   f"{g:.2f} at D = {max(d_star, d_meas)} (measured)" if finite(g) and g > 1.05
                   else "they differ: time outside draft and verification (loop overhead) or noise")
        best = r["measured speedup there"]
        loses = (f" No D pays: the best measured speedup is {best:.2f}x, slower than plain decoding."
                 if finite(best) and not best > 1 else "")
        lines.append(f"- {r['mechanism']}: rho = {r['rho']:.3g}; AL/(1+rho D) peaks at D = {d_star}, "
                     f"the measured speedup at D = {d_meas} ({why}).{loses}")
    return lines


def _figure(sec: Section, conf: pd.DataFrame, out: Path) -> None:
    series = []
    for i, (mech, grp) in enumerate(conf.sort_values(D).groupby(MECH)):
        c = f"C{i % 10}"
        series.append(plots.Series(f"{mech}: AL (measured)", list(grp[D]), list(grp["al"]), "-o", color=c))
        series.append(plots.Series(f"{mech}: AL/(1+rho D) (modelled)", list(grp[D]), list(grp["al_over_cost"]), "--s", color=c))
        series.append(plots.Series(f"{mech}: speedup (measured)", list(grp[D]), list(grp["speedup"]), ":^", color=c,
                                   low=list(grp["speedup_low"]), high=list(grp["speedup_high"])))
    sec.figure(plots.lines(out / "g4_low_latency.png", series, plots.Axes(
        "draft length D", "tokens per iteration / speedup", f"G4: AL and AL/(1+rho D) at B = {LOW_B}",
        hlines=[(1.0, "")], integer_x=True), "AL(D), AL/(1+rho D) and the measured speedup at B = 1 (bars: its 95% interval)."))


def build(data: ReportData, out: Path) -> Section:
    sec = Section("g4", "G4 - low latency (B = 1): raise D only while AL pays for the draft")
    sec.text("At B = 1 verification barely grows with D; what limits D is the draft cost. rho = (draft time per "
             "draft token) / (target step time) is **measured**; AL(D) is **measured**; AL/(1 + rho D) is **modelled "
             "from measured times**; the measured speedup stands beside it.")
    every = spec_cells(data.ok)
    surface = surface_cells(every)  # the engine's surface: shown whole, each cell with its stability
    if not surface.empty:
        surface_table(sec, surface)
    spec, unstable = stable_cells(every.drop(surface.index))
    cells = spec[spec[B] == LOW_B] if not spec.empty else spec
    left_out = unstable[unstable[B] == LOW_B] if not unstable.empty else unstable
    if len(left_out):
        sec.text(f"{len(left_out)} unstable cell(s) at B = {LOW_B} left out (see the summary's list): no verdict is "
                 "drawn from them.")
    if cells.empty:
        sec.text(f"No speculative cell at B = {LOW_B}: n/a." if left_out.empty else
                 f"No stable speculative cell at B = {LOW_B}: no verdict (n/a).")
        return sec
    if setup_cols(cells):
        sec.text(f"Note: several setups ({', '.join(setup_cols(cells))}) are pooled per mechanism here.")
    conf = curves(cells)
    rows = _per_mechanism(conf)
    summary = pd.DataFrame(rows)
    sec.values["summary"] = summary.to_dict("records")
    sec.values["curves"] = conf.to_dict("records")
    sec.table(summary, f"Per mechanism at B = {LOW_B}.",
              {"rho": MEASURED, "D where AL stops paying (max AL/(1+rho D))": DERIVED, "AL/(1+rho D) there": DERIVED,
               "measured best D": MEASURED, "measured speedup there": MEASURED})
    table = conf[[MECH, D, "al", "rho", "al_over_cost", "speedup"]].rename(columns={
        MECH: "mechanism", D: "D", "al": "AL", "al_over_cost": "AL/(1+rho D)", "speedup": "measured speedup"})
    sec.table(table, "AL(D), the modelled low-latency speedup and the measured speedup.",
              {"AL": MEASURED, "rho": MEASURED, "AL/(1+rho D)": DERIVED, "measured speedup": MEASURED})
    lines = _verdict_lines(rows, conf, cells)
    if lines:
        sec.text("\n".join(lines))
    _figure(sec, conf, out)
    return sec
