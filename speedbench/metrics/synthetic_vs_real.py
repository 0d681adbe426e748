"""Synthetic against real acceptance: how far a synthetic-acceptance cell's speedup is from the real drafter's.

A *real* cell ran the drafter's own acceptance; its *synthetic twin* ran the same load point (same
target, drafter, D, concurrency, prompts, output length) with the accepted counts drawn at the real
cell's per-position conditional acceptance (``drafter.synthetic_rates`` = the real cell's
``accepted_per_pos_cond``, ``drafter.synthetic_draw=independent``: every row of every step its own
draw, as vLLM's synthetic sampler does). Both are ordinary paired cells (baseline vs speculation).

* ``ratio`` = speedup_synthetic / speedup_real, each the project's speedup estimator
  (``metrics.speedup``: per request the median over repeats of the paired TPOT ratios, then the
  geometric mean over requests), on the requests both cells measured.
* Its interval: the wider of (a) a paired two-level percentile bootstrap (resample the shared
  request ids once for both cells, then each cell's repeats within each request independently:
  the cells ran in different windows) and (b) a Welch t-interval of the difference of the two
  cells' mean log per-window speedups (the windows are the independent units of a load point,
  as ``metrics.speedup.window_interval``). NaN when either cell has fewer than two windows.
* ``step_stats``: per drafting step of the speculative pass, the accepted length (accepted + 1:
  tokens the step produced); its mean and variance over steps (ddof=1), and the variance over
  requests of each request's AL (how much acceptance is correlated within a request: the synthetic
  arm's is close to var_step / steps-per-request, the real arm's larger when requests differ).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .speedup import geomean, speedup_of, t_quantile, tpot_ratio_table

NAN = math.nan

# the columns that make two cells the same load point, apart from the acceptance
TWIN_KEYS = ("target", "drafter", "method", "num_speculative_tokens", "batch_size", "concurrency", "request_rate",
             "dataset", "category", "context_bucket", "temperature", "top_p", "top_k", "backend", "prompts_digest",
             "max_new_tokens")


@dataclass(frozen=True)
class RatioEstimate:
    point: float  # speedup_synthetic / speedup_real
    low: float
    high: float
    real: float  # each arm's speedup on the shared requests
    synthetic: float
    n_requests: int
    windows: tuple[int, int]  # usable windows (repeats) of (real, synthetic)
    estimator: str = ("ratio of the speedup estimators on shared requests; interval: wider of a paired two-level "
                      "bootstrap (requests jointly, repeats per cell) and a Welch t on per-window log speedups")


@dataclass(frozen=True)
class StepStats:
    steps: int  # drafting steps of the speculative pass (every repeat)
    mean: float  # mean accepted length per step (accepted + 1)
    var: float  # its variance over steps (ddof=1)
    var_request_al: float  # variance over requests of each request's AL (ddof=1)
    requests: int


def _clean(r: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(r) & (r > 0), r, np.nan)


def _usable(r: np.ndarray) -> np.ndarray:
    """Drop repeats (columns) without a finite ratio."""
    return r[:, ~np.all(np.isnan(r), axis=0)] if r.size else r


def _per_window(r: np.ndarray) -> np.ndarray:
    w = np.asarray(geomean(r, axis=0), dtype=float) if r.size else np.empty(0)
    return np.log(w[np.isfinite(w) & (w > 0)])


def welch_log_interval(real_w: np.ndarray, syn_w: np.ndarray, confidence: float) -> tuple[float, float]:
    """A Welch t-interval of exp(mean log syn - mean log real) from per-window log speedups; NaN with < 2 each."""
    if real_w.size < 2 or syn_w.size < 2:
        return NAN, NAN
    vr, vs = float(np.var(real_w, ddof=1)) / real_w.size, float(np.var(syn_w, ddof=1)) / syn_w.size
    diff = float(syn_w.mean() - real_w.mean())
    se = math.sqrt(vr + vs)
    if se == 0:
        return math.exp(diff), math.exp(diff)
    df = (vr + vs) ** 2 / ((vr ** 2 / (real_w.size - 1) if vr else 0.0) + (vs ** 2 / (syn_w.size - 1) if vs else 0.0))
    half = t_quantile(0.5 + confidence / 2, max(1, int(df))) * se
    return math.exp(diff - half), math.exp(diff + half)


def speedup_ratio(real: tuple[list[str], np.ndarray], synthetic: tuple[list[str], np.ndarray],
                  confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0) -> RatioEstimate:
    """speedup(synthetic) / speedup(real) with its interval (module docstring); each argument is
    ``(request ids, paired TPOT ratios [request, repeat])`` as ``metrics.speedup.tpot_ratio_table`` gives."""
    ids_r, rr = real
    ids_s, rs = synthetic
    shared = sorted(set(ids_r) & set(ids_s))
    if not shared:
        return RatioEstimate(NAN, NAN, NAN, NAN, NAN, 0, (0, 0))
    a = _usable(_clean(np.asarray(rr, float)[[ids_r.index(i) for i in shared]]))
    b = _usable(_clean(np.asarray(rs, float)[[ids_s.index(i) for i in shared]]))
    keep = ~(np.all(np.isnan(a), axis=1) | np.all(np.isnan(b), axis=1)) if a.size and b.size else np.zeros(0, bool)
    a, b = a[keep], b[keep]
    n = int(keep.sum())
    if n == 0:
        return RatioEstimate(NAN, NAN, NAN, NAN, NAN, 0, (0, 0))
    s_real, s_syn = float(speedup_of(a)), float(speedup_of(b))
    point = s_syn / s_real
    ma, mb = a.shape[1], b.shape[1]
    low = high = NAN
    if ma > 1 and mb > 1:
        rng = np.random.default_rng(seed)
        rows = rng.integers(0, n, size=(n_resamples, n))
        ca = rng.integers(0, ma, size=(n_resamples, n, ma))
        cb = rng.integers(0, mb, size=(n_resamples, n, mb))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            est = np.asarray(speedup_of(b[rows[:, :, None], cb])) / np.asarray(speedup_of(a[rows[:, :, None], ca]))
        est = est[np.isfinite(est)]
        tail = (1.0 - confidence) / 2
        if est.size:
            low, high = (float(x) for x in np.quantile(est, [tail, 1.0 - tail]))
        w_low, w_high = welch_log_interval(_per_window(a), _per_window(b), confidence)
        if math.isfinite(w_low):
            low, high = min(low, w_low), max(high, w_high)
    return RatioEstimate(point, low, high, s_real, s_syn, n, (ma, mb))


def step_stats(steps: pd.DataFrame) -> StepStats:
    """Accepted length per drafting step of the speculative pass (``steps/<cell>.parquet`` rows)."""
    s = steps
    if "role" in s:
        s = s[s["role"] == "spec"]
    s = s[s["drafted"] > 0]
    if s.empty:
        return StepStats(0, NAN, NAN, NAN, 0)
    length = s["accepted"].to_numpy(float) + 1.0
    per_req = s.groupby("request_id")["accepted"].agg(["sum", "count"])
    al_req = 1.0 + per_req["sum"].to_numpy(float) / per_req["count"].to_numpy(float)
    return StepStats(int(length.size), float(length.mean()), float(np.var(length, ddof=1)) if length.size > 1 else NAN,
                     float(np.var(al_req, ddof=1)) if al_req.size > 1 else NAN, int(al_req.size))


def verdict(low: float, high: float) -> str:
    """What the ratio's interval says (never more): synthetic over- or under-states the real speedup, or undecided."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undecided (no interval)"
    if low > 1:
        return "synthetic overstates the real speedup"
    if high < 1:
        return "synthetic understates the real speedup"
    return "undecided (interval includes 1)"


def twins(cells: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    """(real, synthetic) cell pairs of the same load point: a synthetic cell (``synthetic_al`` set, drawn from
    ``synthetic_rates``) and the real cell with the same ``TWIN_KEYS``; the newest synthetic twin per real cell."""
    if cells.empty or "synthetic_al" not in cells:
        return []
    keys = [k for k in TWIN_KEYS if k in cells]
    syn_mask = pd.to_numeric(cells["synthetic_al"], errors="coerce").notna()
    real, syn = cells[~syn_mask], cells[syn_mask]
    out = []
    for _, r in real.iterrows():
        same = syn
        for k in keys:
            same = same[same[k].astype(str) == str(r[k])]
        if not same.empty:
            out.append((r, same.iloc[-1]))
    return out


def rates_of(cell) -> list[float]:
    """The conditional per-position acceptance a synthetic twin draws at (the real cell's ``accepted_per_pos_cond``);
    a position no draft reached (NaN) gets rate 0."""
    rates = [float(x) for x in (cell.get("accepted_per_pos_cond") if hasattr(cell, "get") else cell) or []]
    return [round(r, 6) if math.isfinite(r) else 0.0 for r in rates]


def compare(real_cell, syn_cell, real_requests: pd.DataFrame, syn_requests: pd.DataFrame, real_steps: pd.DataFrame,
            syn_steps: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 1000) -> dict:
    """One row of the comparison: both speedups (each cell's own interval), their ratio and interval, the steps' stats."""
    est = speedup_ratio(tpot_ratio_table(real_requests), tpot_ratio_table(syn_requests), confidence, n_resamples)
    sr, ss = step_stats(real_steps), step_stats(syn_steps)
    return {
        "C": int(real_cell["concurrency"]), "D": int(real_cell["num_speculative_tokens"]),
        "AL real": float(real_cell["al"]), "AL synthetic": float(syn_cell["al"]),
        "speedup real": float(real_cell["speedup"]),
        "real CI": [float(real_cell["speedup_ci_low"]), float(real_cell["speedup_ci_high"])],
        "speedup synthetic": float(syn_cell["speedup"]),
        "synthetic CI": [float(syn_cell["speedup_ci_low"]), float(syn_cell["speedup_ci_high"])],
        "ratio": est.point, "ratio CI": [est.low, est.high], "requests": est.n_requests,
        "windows": list(est.windows),
        "var step real": sr.var, "var step synthetic": ss.var,
        "var request AL real": sr.var_request_al, "var request AL synthetic": ss.var_request_al,
        "steps real": sr.steps, "steps synthetic": ss.steps,
        "verdict": verdict(est.low, est.high),
    }
