"""Which window each load point counted: the whole pass or its steady window (``load.steady_state``).

Reads each load-point cell's ``extra.steady_window`` (``metrics.steady.steady_note``). A point without it
counted each pass whole (first send -> last token, ramp and drain included). A point with it counted the
steady window of each pass and repeat; the table gives the window's length, its share of the whole
pass, the finished requests it kept, the rule that found it, and the warning when a window is shorter
than max(10 s, 10% of the pass) or a pass had none (that pass then counted every request).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .common import MEASURED, Section
from .under_load import load_points


def _rows(cells: pd.DataFrame) -> list[dict]:
    rows = []
    for _, cell in cells.iterrows():
        extra = cell.get("extra") if isinstance(cell.get("extra"), dict) else {}
        note = extra.get("steady_window") or {}
        point = {"drafter": cell["drafter"], "D": int(cell["num_speculative_tokens"]),
                 "C": cell.get("concurrency"), "rate": cell.get("request_rate")}
        spans = [(role, rep, s) for role in ("baseline", "spec") for rep, s in (note.get(role) or {}).items()]
        if not spans:
            rows.append(point | {"window": "whole pass", "pass": "both", "seconds": math.nan,
                                 "share of pass": math.nan, "requests kept": "all", "warning": "none"})
            continue
        for role, rep, s in spans:
            found = bool(s.get("found"))
            whole = float(s.get("whole_s", math.nan))
            length = float(s.get("length_s", math.nan)) if found else math.nan
            rows.append(point | {
                "window": ("steady: " + str(s.get("rule", ""))) if found else "whole pass (no steady window)",
                "pass": f"{role} r{rep}", "seconds": round(length, 2) if found else math.nan,
                "share of pass": round(length / whole, 3) if found and whole > 0 else math.nan,
                "requests kept": f"{s.get('kept')}/{s.get('finished')}",
                "warning": "short" if s.get("short") else ("none" if found else str(s.get("rule", "")) or "none")})
    return rows


def build(data, out: Path) -> Section:
    sec = Section("steady_window", "Which window each load point counted")
    if data.cells.empty:
        sec.text("No load-point cells: n/a.")
        return sec
    closed, opened = load_points(data.ok)
    cells = pd.concat([closed, opened])
    if cells.empty:
        sec.text("No load-point cells: n/a.")
        return sec
    rows = _rows(cells)
    frame = pd.DataFrame(rows)
    steady = int((frame["window"] != "whole pass").sum())
    sec.text("A load point counts each pass whole (first send -> last token, the ramp and the drain included) "
             "unless it ran with `load.steady_state=true`; then its speedups and load columns come from each "
             "pass's steady window (closed loop: in flight >= ceil(0.95 C) until the drain; open loop: the first "
             "request's end to the last send). A window shorter than max(10 s, 10% of the pass) is marked short.")
    sec.table(frame, "The window each load point's passes counted.", {"seconds": MEASURED, "share of pass": MEASURED})
    warnings = sorted({str((c.get("extra") or {}).get("steady_window", {}).get("warning", ""))
                       for _, c in cells.iterrows() if isinstance(c.get("extra"), dict)} - {""})
    for w in warnings:
        sec.text(f"Warning: {w}")
    sec.values["windows"] = rows
    sec.values["steady_passes"] = steady
    return sec
