"""AL and step time along the run: per cell, the speculative pass's windows in wall-clock order
(``extra.over_time``, ``metrics.over_time``), a plot of AL per window, and each series' trend test
(OLS slope per window with its t interval; drift when the interval excludes 0)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import plots
from .common import MEASURED, Section, spec_cells


def _label(cell) -> str:
    conc = cell.get("concurrency", -1)
    point = f" C={int(conc)}" if pd.notna(conc) and conc > 0 else ""
    return f"{cell['drafter']} D={int(cell['num_speculative_tokens'])} B={int(cell['batch_size'])}{point} {cell['category']}"


def _iv(t: dict, key: str = "slope") -> str:
    if t.get(key) is None:
        return "n/a"
    return f"{t['slope']:+.4f} [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]"


def build(data, out: Path) -> Section:
    sec = Section("over_time", "AL and step time over the run")
    cells = spec_cells(data.ok) if not data.cells.empty else pd.DataFrame()
    rows, series = [], []
    for i, (_, cell) in enumerate(cells.iterrows()):
        note = (cell.get("extra") if isinstance(cell.get("extra"), dict) else {}).get("over_time") or {}
        if not note.get("windows"):
            continue
        label = _label(cell)
        al, step = note["al_trend"], note["step_ms_trend"]
        rows.append({"cell": label, "windows": len(note["windows"]), "AL first": round(note["windows"][0]["al"], 3),
                     "AL last": round(note["windows"][-1]["al"], 3), "AL slope / window": _iv(al),
                     "AL drift": {True: "drift", False: "none shown"}.get(al.get("drifts"), "n/a"),
                     "step ms slope / window": _iv(step),
                     "step drift": {True: "drift", False: "none shown"}.get(step.get("drifts"), "n/a")})
        w = note["windows"]
        series.append(plots.Series(label, [x["window"] for x in w], [x["al"] for x in w], "-o", color=f"C{i % 10}"))
    if not rows:
        sec.text("No cell recorded its steps along the run (`extra.over_time`): n/a.")
        return sec
    sec.text("Each cell's speculative target iterations, in wall-clock order (repeat, then iteration), cut into equal "
             "windows: AL and mean step time per window. Trend test: ordinary least-squares slope per window with its "
             "Student-t interval (cell confidence); \"drift\" when the interval excludes 0, else \"none shown\". A "
             "short run has few steps per window: for drift over serving time run a long point (docs/load.md).")
    sec.table(pd.DataFrame(rows), "AL and step-time trend per cell.", {"AL slope / window": MEASURED,
                                                                        "step ms slope / window": MEASURED})
    sec.figure(plots.lines(out / "al_over_time.png", series, plots.Axes(
        "window (wall-clock order)", "AL (measured)", "AL per window along the run", integer_x=True),
        "AL per window along each cell's speculative pass"))
    sec.values["trends"] = rows
    return sec
