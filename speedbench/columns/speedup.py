"""Speedup columns (``metrics.speedup`` fills them; the estimator is its module docstring)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class SpeedupColumns:
    speedup: float = NAN  # tpot_ms_baseline / tpot_ms_spec, paired, geometric mean over requests
    speedup_ci_low: float = NAN  # 95% two-level bootstrap interval (requests, then repeats)
    speedup_ci_high: float = NAN
    speedup_cv: float = NAN  # across repeats
    speedup_noise: float = NAN  # relative half-width with the prompts fixed (repeats resampled only)
    n_repeats: int = 0
    speedup_window_spread: float = NAN  # load points: the per-window t-interval's relative half-width
    # the windows (repeats) behind the speedup: how many had a finite paired ratio (-1: a folder written before
    # they were counted), and which had none, named with why ("" when none): left out of the estimate, never
    # silently; fewer than two usable windows give no interval (NaN bounds) and never a stable cell
    speedup_windows: int = -1
    speedup_nan_windows: str = ""
