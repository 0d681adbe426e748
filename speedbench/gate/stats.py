"""The gate's statistics: cell-level AL and speedup from per-request records, and a paired
bootstrap of the ratio current / baseline over requests.

Cell-level metrics are the cell table's own definitions (``metrics/``), computed on a set
of requests, so the point estimate on all requests equals the cell table's value:

* AL      = 1 + sum(accepted) / sum(drafts) over the speculative run's requests
            (per request: 1 + accepted / n_drafts; pooled so long requests weigh more);
* speedup = the cell table's estimator (``metrics.paired_speedup``): geometric mean over
            requests of the median over repeats of the paired TPOT ratio.

The bootstrap resamples request ids with replacement and evaluates both runs on the same
resampled ids (requests are matched by id across the two runs: the same prompts), so
differences between prompts cancel and only the change between the runs remains: for
deterministic greedy AL two identical runs give a ratio of exactly 1 in every resample.
For the speedup it resamples requests only (one level): each request's median over its repeats
already carries that request's repeat-to-repeat noise, so the spread of the per-request changes
between the runs holds it; resampling the repeats again inside each resampled request (a second
level) counts that noise twice. Measured on the CI benchmark (docs/ci-gate.md): the second level
made the pooled interval about twice as wide as identical runs ever disagreed, and hid a 5% loss in
two pairs of three. Only a cell with a single request resamples its repeats (nothing else varies).
What no single run can see, the shift between two invocations, is the gate config's tolerance: the
noise threshold below which a change is "no change", sized from identical reruns
(scripts/gate_false_alarms.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import metrics
from ..records import STATUS_OK


@dataclass(frozen=True)
class RequestArrays:
    """Per-request columns of one cell in one run, aligned on ``request_ids``; ratios per repeat."""

    request_ids: tuple[str, ...]
    accepted: np.ndarray
    drafts: np.ndarray
    ratios: np.ndarray  # [request, repeat]: paired TPOT baseline / speculative (NaN where missing)

    @staticmethod
    def from_frame(frame: pd.DataFrame) -> "RequestArrays":
        ids, ratios = metrics.tpot_ratio_table(frame)
        ok = frame[frame["status"] == STATUS_OK]
        acc = ok[ok["role"] == "spec"].groupby("request_id")[["accepted", "n_drafts"]].sum()
        return RequestArrays(tuple(ids), acc.loc[ids, "accepted"].to_numpy(float), acc.loc[ids, "n_drafts"].to_numpy(float),
                             ratios)

    def take(self, ids: list[str]) -> "RequestArrays":
        pos = {r: i for i, r in enumerate(self.request_ids)}
        idx = np.array([pos[r] for r in ids], dtype=int)
        return RequestArrays(tuple(ids), self.accepted[idx], self.drafts[idx], self.ratios[idx])


def al(r: RequestArrays, idx: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """AL for each row of resampled request indices ``idx`` (shape [resamples, n])."""
    return metrics.al_from_counts(r.accepted[idx].sum(-1), r.drafts[idx].sum(-1))


def speedup(r: RequestArrays, idx: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """The cell table's speedup for each row of resampled request indices; with ``rng`` and a single
    request the repeats are resampled instead (the module docstring says why only then)."""
    m = r.ratios.shape[1]
    if rng is None or m <= 1 or idx.shape[-1] > 1:
        cols = np.broadcast_to(np.arange(m), (*idx.shape, m))
    else:
        cols = rng.integers(0, m, size=(*idx.shape, m))
    return np.asarray(metrics.speedup_of(r.ratios[idx[..., None], cols]))  # [resample, request, repeat]


METRICS = {"al": al, "speedup": speedup}


@dataclass(frozen=True)
class RatioEstimate:
    baseline: float  # the metric on all matched requests, baseline run
    current: float
    ratio: float  # current / baseline
    low: float  # bootstrap percentile interval of the ratio at the gate's confidence
    high: float
    n_requests: int
    samples: np.ndarray  # the bootstrap ratios (for pooling across cells); empty when not bootstrapped


def compare(
    metric: str, base: RequestArrays, cur: RequestArrays, confidence: float, n_resamples: int, rng: np.random.Generator
) -> RatioEstimate:
    """Point ratio and paired-bootstrap interval of ``metric`` current / baseline."""
    ids = sorted(set(base.request_ids) & set(cur.request_ids))
    fn = METRICS[metric]
    b, c = base.take(ids), cur.take(ids)
    n = len(ids)
    if n == 0:
        return RatioEstimate(math.nan, math.nan, math.nan, math.nan, math.nan, 0, np.empty(0))
    every = np.arange(n)[None]
    point_b, point_c = float(fn(b, every)[0]), float(fn(c, every)[0])
    ratio = point_c / point_b if point_b > 0 else math.nan
    idx = rng.integers(0, n, size=(n_resamples, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        samples = fn(c, idx, rng) / fn(b, idx, rng)
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:  # no resample measured anything: no interval (never [ratio, ratio])
        return RatioEstimate(point_b, point_c, ratio, math.nan, math.nan, n, np.empty(0))
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return RatioEstimate(point_b, point_c, ratio, float(low), float(high), n, samples)


def pooled(estimates: list[RatioEstimate], confidence: float) -> tuple[float, float, float]:
    """Geometric mean of per-cell ratios and its interval (resample i of every cell together)."""
    usable = [e for e in estimates if e.samples.size and math.isfinite(e.ratio) and e.ratio > 0]
    if not usable:
        return math.nan, math.nan, math.nan
    point = metrics.geomean([e.ratio for e in usable])
    together = np.asarray(metrics.geomean(np.stack([e.samples for e in usable]), axis=0))
    together = together[np.isfinite(together)]
    if together.size == 0:  # no interval, never [point, point]
        return point, math.nan, math.nan
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(together, [tail, 1.0 - tail])
    return point, float(low), float(high)
