"""What a verdict rests on, stated once for every view (schedule, report, gate).

* **A verdict needs a measured, finite interval**: a speedup without both interval ends finite
  (NaN: nothing measured, e.g. ``max_new_tokens=1`` gives no TPOT) decides nothing -- no K, no
  pick, no pass or fail; it is shown as ``n/a`` with the reason.
* **A verdict built on unstable cells says so**: every pick, schedule range, G-verdict or
  ``--verify`` flag names how many of the cells behind it were unstable (``unstable_note``).
* **Two measurements differ only outside both intervals** (``differ``): a flag needs the intervals
  apart, not a point outside the other's interval.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

NO_INTERVAL = "no measured, finite speedup interval"


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def measured_interval(low: Any, high: Any) -> tuple[float, float] | None:
    """(low, high) when both ends are measured and finite; None: no verdict may be drawn."""
    lo, hi = _f(low), _f(high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def row_interval(row: Any) -> tuple[float, float] | None:
    """A cell row's measured speedup interval (``speedup_ci_low``/``speedup_ci_high``), or None."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    if not math.isfinite(_f(get("speedup", math.nan))):
        return None
    return measured_interval(get("speedup_ci_low", math.nan), get("speedup_ci_high", math.nan))


def differ(a: tuple[float, float] | None, b: tuple[float, float] | None) -> str:
    """``below`` / ``above`` when interval ``a`` lies wholly below / above ``b``; ``ok`` when they
    overlap; ``n/a`` when either is not measured."""
    if a is None or b is None:
        return "n/a"
    if a[1] < b[0]:
        return "below"
    if a[0] > b[1]:
        return "above"
    return "ok"


def is_stable(row: Any) -> bool:
    """A row without a ``stable`` value (results from before the protocol) counts as stable."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    return stable_value(get("stable", True))


def stable_value(v: Any) -> bool:
    """One ``stable`` value: missing (None or NaN: a cell from before the protocol) counts as stable."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    return bool(v)


def unstable_note(rows: Iterable[Any]) -> str:
    """``""`` when every row is stable, else ``"unstable: N of M cells"`` (the evidence's caveat)."""
    rows = list(rows)
    n = sum(1 for r in rows if not is_stable(r))
    return f"unstable: {n} of {len(rows)} cells" if n else ""
