"""G4/G5's central comparison: how each mechanism's draft cost grows with D, against what it buys.

A serial drafter (a draft model, layer skip, an EAGLE-3 head) pays one draft forward per draft
token, so its overhead is modelled as O_d = rho * D; a parallel drafter (PARD, DFlash) drafts all
D tokens in one forward, and n-gram lookup costs almost nothing. Per (B, mechanism, D) this
shows the measured draft time, the measured AL, the measured overhead O_d = draft time / target
step time (``t_draft_ms / t_verify_ms_baseline``) beside the serial model rho * D, with rho read
from the mechanism's smallest measured D (rho = O_d(D_min) / D_min), and the draft time's growth
over that smallest D. A parallel drafter's measured O_d stays near flat where rho * D climbs.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from . import plots
from .common import B, D, DERIVED, MEASURED, MECH, Section, per_config, setup_cols

COLUMNS = {MECH: "mechanism", D: "D", B: "B", "al": "AL", "t_draft_ms": "draft ms", "o_d": "O_d",
           "rho_d": "rho*D", "growth": "draft ms / draft ms at D_min"}


def cost_table(spec: pd.DataFrame) -> pd.DataFrame:
    """Per (B, mechanism, D): AL, draft ms, measured O_d, modelled rho*D and the draft-time growth."""
    conf = per_config(spec, ["al", "t_draft_ms", "t_verify_ms_baseline"])
    if conf.empty:
        return pd.DataFrame(columns=list(COLUMNS.values()))
    conf["o_d"] = conf["t_draft_ms"] / conf["t_verify_ms_baseline"]
    setup = setup_cols(spec)
    rows = []
    for _, grp in conf.groupby(setup + [B, MECH], sort=True, dropna=False):
        grp = grp.sort_values(D)
        first = grp.dropna(subset=["o_d"])
        rho = first["o_d"].iloc[0] / first[D].iloc[0] if len(first) else math.nan
        base_ms = first["t_draft_ms"].iloc[0] if len(first) else math.nan
        grp = grp.assign(rho_d=rho * grp[D], growth=grp["t_draft_ms"] / base_ms)
        rows.append(grp)
    table = pd.concat(rows, ignore_index=True)[setup + list(COLUMNS)]
    return table.rename(columns=COLUMNS).sort_values([*setup, "B", "mechanism", "D"]).reset_index(drop=True)


def add_to(sec: Section, spec: pd.DataFrame, out: Path) -> None:
    """The draft-cost table and figure, appended to ``sec`` (the G5 mechanism section)."""
    table = cost_table(spec)
    if table.empty:
        return
    sec.values["draft_cost"] = table.to_dict("records")
    sec.text("**Draft cost vs D per mechanism.** O_d = draft time / target step time (**measured**); rho*D = the "
             "serial-drafter model, rho = O_d at the mechanism's smallest measured D divided by that D (**modelled "
             "from measured times**). A serial drafter follows rho*D; a parallel drafter (one forward for all D "
             "tokens) stays near flat; the speedup-optimal D per B is the ranking's best D above.")
    sec.table(table, "Draft time, AL and overhead per D (mean over categories).",
              {"AL": MEASURED, "draft ms": MEASURED, "O_d": MEASURED, "rho*D": DERIVED,
               "draft ms / draft ms at D_min": MEASURED})
    b_min = table["B"].min()
    series = []
    at_b = table[table["B"] == b_min]
    label = [c for c in at_b.columns if c not in COLUMNS.values()] + ["mechanism"]  # setup columns that vary
    for i, (key, grp) in enumerate(at_b.groupby(label)):
        mech = " ".join(str(k) for k in key) if isinstance(key, tuple) else str(key)
        c = f"C{i % 10}"
        series.append(plots.Series(f"{mech}: O_d (measured)", list(grp["D"]), list(grp["O_d"]), "-o", color=c))
        series.append(plots.Series(f"{mech}: rho*D (modelled)", list(grp["D"]), list(grp["rho*D"]), "--", color=c,
                                   kind="modelled"))
    sec.figure(plots.lines(out / "g5_draft_cost.png", series, plots.Axes(
        "draft length D", "draft overhead O_d (draft time / target step)",
        f"G5: draft overhead vs D at B = {b_min}", integer_x=True),
        "Measured draft overhead per mechanism beside the serial model rho*D."))
