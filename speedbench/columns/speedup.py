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
