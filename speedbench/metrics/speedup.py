"""Speedup estimator (the cell table's ``speedup``; the gate and the report use the same):
  every request is measured in several *repeats*; in each repeat its baseline and speculative
  passes run back to back in alternating order (ABBA), so drift and bursts of load hit both.
  The paired ratio of request i in repeat r is TPOT_base[i, r] / TPOT_spec[i, r];
  s_i = median over repeats of the paired ratios (a burst that hit one pass is outvoted);
  speedup = geometric mean over requests of s_i (each prompt weighs the same; ratios average
  on the log scale). Its interval (``speedup_ci_low/high``) is a two-level percentile bootstrap:
  resample requests, then repeats within each resampled request, so both request-to-request
  and repeat-to-repeat variation are in it. ``speedup_noise``: the relative half-width of the
  same interval with the prompts held fixed (repeats resampled only): the measurement's own
  noise, which more repeats shrink; a cell is stable when it is within the protocol's target.
  ``speedup_cv``: the coefficient of variation of the per-repeat estimates (geometric mean over
  requests of the repeat's paired ratios).
  Load points (``windows=True``): every request of a repeat ran in the same window (the same
  server, client and machine state), so the windows, not the requests, are the independent
  units of the run-to-run variation; the interval is then the wider of the bootstrap above and
  a Student-t interval of the per-window estimates on the log scale (``window_interval``), for
  the noise as well. ``speedup_window_spread``: that t-interval's relative half-width alone.
  ``speedup_predicted`` is the same estimator over per-(request, repeat) predictions from the
  same pairs' measured step times.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..records import STATUS_OK, RequestRecord
from ..columns import SpeedupColumns

NAN = math.nan


@dataclass(frozen=True)
class SpeedupEstimate:
    point: float
    low: float  # percentile bootstrap interval at ``confidence``
    high: float
    cv: float  # across repeats (std / mean of per-repeat estimates); NaN with one repeat
    n_requests: int
    n_repeats: int  # usable repeats (windows): those with at least one finite paired ratio
    samples: np.ndarray  # bootstrap estimates (for pooling across cells); empty when not bootstrapped
    nan_windows: tuple[int, ...] = ()  # positions of the repeats without any finite ratio: counted, named, left out

    @property
    def rel_half_width(self) -> float:
        return (self.high - self.low) / 2 / self.point if self.point > 0 else NAN


def geomean(values, axis: int | None = None):
    """Geometric mean of the positive finite values (the rest left out; NaN where none): how
    speedups and other ratios average, here and in the gate and the report."""
    import warnings

    x = np.asarray(values, dtype=float)
    x = np.where(np.isfinite(x) & (x > 0), x, np.nan)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # nothing usable: NaN, as it should be
        out = np.exp(np.nanmean(np.log(x), axis=axis)) if x.size else np.float64(NAN)
    return float(out) if np.ndim(out) == 0 else out


def speedup_of(ratios):
    """The speedup estimator on paired ratios ``[..., request, repeat]``: each request's median
    over its repeats, then the geometric mean over requests (non-finite ratios left out)."""
    import warnings

    r = np.asarray(ratios, dtype=float)
    r = np.where(np.isfinite(r) & (r > 0), r, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a request with no finite ratio: left out
        return geomean(np.nanmedian(r, axis=-1), axis=-1)


def t_quantile(p: float, df: int) -> float:
    """The Student-t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher
    expansion around the normal quantile (Abramowitz & Stegun 26.7.5; within 0.2% from 3 on)."""
    from statistics import NormalDist

    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * v ** 4))


def window_interval(per_window, confidence: float = 0.95) -> tuple[float, float]:
    """A Student-t interval of the geometric mean of per-window estimates (log scale); NaN with
    fewer than two windows."""
    x = np.asarray(per_window, dtype=float)
    x = np.log(x[np.isfinite(x) & (x > 0)])
    if x.size < 2:
        return NAN, NAN
    half = t_quantile(0.5 + confidence / 2, x.size - 1) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    mean = float(x.mean())
    return math.exp(mean - half), math.exp(mean + half)


def paired_speedup(ratios: np.ndarray, confidence: float = 0.95, n_resamples: int = 1000,
                   rng: np.random.Generator | None = None, requests: bool = True,
                   windows: bool = False) -> SpeedupEstimate:
    """The speedup estimator (see the module docstring) from paired ratios [request, repeat].

    ``requests=True``: the interval resamples requests and repeats (what the cell reports);
    ``False``: repeats only, the prompts held fixed -- the measurement's own noise, which more
    repeats shrink (the protocol's stopping rule and ``stable`` use it). With one usable repeat (and,
    for ``requests=True``, one request; for a load point, ``windows``, whatever the requests) there is
    nothing to resample: the interval is NaN, not [point, point].
    NaN entries (a request with one token, a failed pass) are left out; a request with no
    finite ratio is dropped; a repeat with no finite ratio (a window that measured nothing) is left out,
    counted and named (``nan_windows``), never dropped silently: ``n_repeats`` counts the usable ones.
    """
    r = np.asarray(ratios, dtype=float)
    if r.ndim == 1:
        r = r[:, None]
    r = np.where(np.isfinite(r) & (r > 0), r, np.nan)
    usable = ~np.all(np.isnan(r), axis=0) if r.ndim == 2 and r.shape[0] else np.zeros(r.shape[-1], dtype=bool)
    nan_windows = tuple(int(i) for i in np.flatnonzero(~usable))
    r = r[:, usable] if r.ndim == 2 else r
    r = r[~np.all(np.isnan(r), axis=1)] if r.size else r
    n = r.shape[0] if r.ndim == 2 else 0
    m = r.shape[1] if n else 0
    if n == 0:
        return SpeedupEstimate(NAN, NAN, NAN, NAN, 0, 0, np.empty(0), nan_windows)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        point = float(speedup_of(r))
        per_repeat = geomean(r, axis=0) if m > 1 else np.array([point])
        per_repeat = per_repeat[np.isfinite(per_repeat)]
        cv = float(np.std(per_repeat, ddof=1) / np.mean(per_repeat)) if per_repeat.size > 1 else NAN
        if m < 2 and (not requests or n < 2 or windows):  # one window says nothing of the noise: no interval,
            return SpeedupEstimate(point, NAN, NAN, cv, n, m, np.empty(0), nan_windows)  # not a zero-width one
        rng = rng if rng is not None else np.random.default_rng(0)
        rows = rng.integers(0, n, size=(n_resamples, n)) if requests else np.broadcast_to(np.arange(n), (n_resamples, n))
        cols = rng.integers(0, m, size=(n_resamples, n, m))
        boot = r[rows[:, :, None], cols]  # [resample, request, repeat]
        est = np.asarray(speedup_of(boot))
    est = est[np.isfinite(est)]
    tail = (1.0 - confidence) / 2
    low, high = (np.quantile(est, [tail, 1.0 - tail]) if est.size else (NAN, NAN))  # nothing resampled: no interval
    if windows and m > 1:  # a load point: the windows' own spread, which resampling within them cannot see
        w_low, w_high = window_interval(per_repeat, confidence)
        low, high = min(low, w_low), max(high, w_high)
    return SpeedupEstimate(point, float(low), float(high), cv, n, m, est, nan_windows)


def geomean_interval(points, lows, highs, confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of per-cell speedups and its interval (the headline over categories).

    Each cell's percentile interval is read as a normal interval on the log scale
    (se = log(high / low) / (2 z)); cells are independent measurements, so the log-mean's
    standard error is sqrt(sum se^2) / n. Cells without a finite interval are left out.
    """
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    rows = [(p, lo, hi) for p, lo, hi in zip(points, lows, highs)
            if all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (p, lo, hi))]
    if not rows:
        return NAN, NAN, NAN
    logs = np.log([p for p, _, _ in rows])
    se = np.array([math.log(hi / lo) / (2 * z) for _, lo, hi in rows])
    mean, err = float(logs.mean()), float(np.sqrt((se ** 2).sum()) / len(rows))
    return math.exp(mean), math.exp(mean - z * err), math.exp(mean + z * err)


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when two intervals share a point (a tie); False when either is missing."""
    if not all(math.isfinite(x) for x in (*a, *b)):
        return False
    return a[0] <= b[1] and b[0] <= a[1]


def _by_request_repeat(records, value) -> dict:
    return {(r.request_id, r.repeat): value(r) for r in records if r.status == STATUS_OK}


def tpot_ratios(base: Sequence[RequestRecord], spec: Sequence[RequestRecord]) -> np.ndarray:
    """Paired TPOT ratios [request, repeat] of requests measured in both runs (NaN where one is missing)."""
    b, s = _by_request_repeat(base, lambda r: r.tpot), _by_request_repeat(spec, lambda r: r.tpot)
    return matrix({k: b[k] / s[k] if s[k] > 0 else NAN for k in b.keys() & s.keys()})


def tpot_ratio_table(frame) -> tuple[list[str], np.ndarray]:
    """(request ids, paired TPOT ratios [request, repeat]) from a requests table (the results store's
    ``requests/<cell>.parquet``: columns request_id, role, status, tpot, repeat); a table written
    before repeats existed counts as one repeat."""
    ok = frame[frame["status"] == STATUS_OK]
    if "repeat" not in ok.columns:
        ok = ok.assign(repeat=0)
    spec, base = ok[ok["role"] == "spec"], ok[ok["role"] == "baseline"]
    ids = sorted(set(spec["request_id"]) & set(base["request_id"]))
    tb = base.drop_duplicates(["request_id", "repeat"]).pivot(index="request_id", columns="repeat", values="tpot")
    ts = spec.drop_duplicates(["request_id", "repeat"]).pivot(index="request_id", columns="repeat", values="tpot")
    reps = sorted(set(tb.columns) & set(ts.columns)) if ids else []
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = tb.loc[ids, reps].to_numpy(float) / ts.loc[ids, reps].to_numpy(float) if ids else np.empty((0, 0))
    return ids, ratios.reshape(len(ids), len(reps))


def matrix(values: dict) -> np.ndarray:
    ids = sorted({i for i, _ in values})
    reps = sorted({r for _, r in values})
    out = np.full((len(ids), len(reps)), np.nan)
    for (i, rep), v in values.items():
        out[ids.index(i), reps.index(rep)] = v
    return out


def widen(point: float, low: float, high: float, rel_sd: float, confidence: float = 0.95) -> tuple[float, float]:
    """``[low, high]`` around ``point`` widened, on the log scale and in quadrature, by a normal
    component of relative SD ``rel_sd`` that the interval cannot see (the per-process offset):
    each side's log half-width h becomes sqrt(h^2 + (z * rel_sd)^2)."""
    if rel_sd <= 0 or not (point > 0 and low > 0 and high > 0):
        return low, high
    from statistics import NormalDist

    extra = (NormalDist().inv_cdf(0.5 + confidence / 2) * math.log1p(rel_sd)) ** 2
    down, up = math.log(point / low), math.log(high / point)
    return point * math.exp(-math.sqrt(down * down + extra)), point * math.exp(math.sqrt(up * up + extra))


def speedup_columns(base: Sequence[RequestRecord], spec: Sequence[RequestRecord], confidence: float = 0.95,
                    n_resamples: int = 1000, windows: bool = False, process_noise: float = 0.0) -> SpeedupColumns:
    """The speedup columns of a cell from its matched passes' requests (every repeat); ``windows``: a load
    point (see the module docstring). ``process_noise``: the relative SD of the per-process offset
    (``protocol.process_noise``), added to the interval in quadrature (``widen``); the noise, which
    decides ``stable``, stays the run's own."""
    ok_b = [r for r in base if r.status == STATUS_OK]
    ok_s = [r for r in spec if r.status == STATUS_OK]
    ratios = tpot_ratios(ok_b, ok_s)
    reps = sorted({r.repeat for r in (*base, *spec)})  # every window that ran, measured or not
    usable = sorted({rep for (i, rep) in {(r.request_id, r.repeat) for r in ok_b} & {(r.request_id, r.repeat) for r in ok_s}})
    est = paired_speedup(ratios, confidence, n_resamples, windows=windows)
    unmatched = {rep: "no request finished in both passes" for rep in reps if rep not in usable}
    measured = {usable[i]: "no request with a TPOT in both passes (one token each, or TPOT 0)" for i in est.nan_windows}
    noise = paired_speedup(ratios, confidence, n_resamples, requests=False, windows=windows)
    spread = NAN
    if windows and est.n_repeats > 1:
        w_low, w_high = window_interval(geomean(np.where(np.isfinite(ratios) & (ratios > 0), ratios, np.nan), axis=0),
                                        confidence)
        spread = (w_high - w_low) / 2 / est.point if est.point > 0 and math.isfinite(w_low) else NAN
    low, high = widen(est.point, est.low, est.high, process_noise, confidence)
    return SpeedupColumns(speedup=est.point, speedup_ci_low=low, speedup_ci_high=high, speedup_cv=est.cv,
                          speedup_noise=noise.rel_half_width, n_repeats=est.n_repeats, speedup_window_spread=spread,
                          speedup_windows=est.n_repeats, speedup_nan_windows=name_windows({**unmatched, **measured}))


def name_windows(why: dict[int, str]) -> str:
    """The windows (repeats) a speedup left out, each named with why: ``"repeat 1: ..."``, ``"; "``-joined."""
    return "; ".join(f"repeat {rep}: {text}" for rep, text in sorted(why.items()))
