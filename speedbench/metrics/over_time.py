"""AL and step time along a run (``extra.over_time``; docs/load.md, "AL and step time over time").

The speculative pass's target iterations, in wall-clock order (repeat, then the engine's iteration
id within it), are cut into ``N_WINDOWS`` windows of equal iteration counts. Per window: the mean
accepted length of its request-steps (``AL``: tokens emitted per step, the acceptance module's
definition) and the mean step time of its iterations (ms). The trend test is an ordinary
least-squares slope of each series against the window index, with its Student-t interval at the
cell's confidence (``scipy.stats.linregress``'s standard error, n - 2 degrees of freedom): a slope
whose interval excludes 0 is reported as drift (``drifts``), otherwise as no drift shown. The
slope is per window; ``slope_per_run`` is it times (windows - 1), the change from first to last.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from ..records import StepRecord

N_WINDOWS = 10  # windows per cell's speculative pass (fewer when it has fewer iterations)
MIN_WINDOWS = 3  # below this no slope has an interval


def _key(s: StepRecord) -> tuple[int, int]:
    return (int(getattr(s, "repeat", 0) or 0), int(s.iteration))


def windows(steps: Sequence[StepRecord], n_windows: int = N_WINDOWS) -> list[dict]:
    """Per window (wall-clock order): index, iterations, request-steps, AL, mean step ms."""
    order = sorted({_key(s) for s in steps})
    if not order:
        return []
    n = min(n_windows, len(order))
    where = {k: min(n - 1, i * n // len(order)) for i, k in enumerate(order)}
    groups: list[list[StepRecord]] = [[] for _ in range(n)]
    for s in steps:
        groups[where[_key(s)]].append(s)
    out = []
    for w, group in enumerate(groups):
        firsts = {}
        for s in group:
            firsts.setdefault(_key(s), s)
        times = [s.t_step for s in firsts.values() if math.isfinite(s.t_step)]
        out.append({"window": w, "iterations": len(firsts), "steps": len(group),
                    "al": float(np.mean([s.emitted for s in group])),
                    "step_ms": float(np.mean(times)) * 1e3 if times else None})
    return out


def trend(values: Sequence[float], confidence: float = 0.95) -> dict:
    """OLS slope of ``values`` against their index, with its t interval; ``drifts`` when it excludes 0."""
    y = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(y) < MIN_WINDOWS:
        return {"slope": None, "ci_low": None, "ci_high": None, "slope_per_run": None, "drifts": None,
                "test": f"no trend test: fewer than {MIN_WINDOWS} windows"}
    fit = stats.linregress(np.arange(len(y)), y)
    half = stats.t.ppf(0.5 + confidence / 2, len(y) - 2) * fit.stderr
    low, high = fit.slope - half, fit.slope + half
    return {"slope": float(fit.slope), "ci_low": float(low), "ci_high": float(high),
            "slope_per_run": float(fit.slope * (len(y) - 1)), "drifts": bool(low > 0 or high < 0),
            "test": f"OLS slope per window, {confidence:.0%} t interval over {len(y)} windows"}


def over_time_notes(spec_steps: Sequence[StepRecord], confidence: float = 0.95,
                    n_windows: int = N_WINDOWS) -> dict:
    """The cell's ``extra.over_time``: the per-window series and the trend of AL and of step time."""
    series = windows(spec_steps, n_windows)
    if not series:
        return {"over_time": {}}
    return {"over_time": {"windows": series, "al_trend": trend([w["al"] for w in series], confidence),
                          "step_ms_trend": trend([w["step_ms"] for w in series], confidence)}}
