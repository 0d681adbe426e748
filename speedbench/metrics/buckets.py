"""Acceptance and step cost by what each engine step saw: its live batch and its live context.

Every step row carries ``live_batch`` (sequences in its forward; -1 unknown) and ``context_len``
(prompt + output tokens before it). Per bucket, over the speculative pass's rows:

* ``steps``, ``drafts`` (rows that proposed), ``al`` = 1 + accepted / drafts (the cell's convention);
* ``t_draft_ms``, ``t_verify_ms``, ``t_step_ms``: means over the bucket's target iterations
  (one per ``iteration`` id, as the cell's split columns count them; NaN where not timed).

Live batch buckets are the sizes seen. Context buckets are named by their lower edge (tokens): by
default powers of two (a step with context c is in ``[2^k, 2^(k+1))``); ``acceptance.context_edges``
(a list of lower edges, e.g. ``[0, 1024, 8192, 32768]``) sets coarser or smaller ones. A cell keeps
both lists in ``extra.by_live_batch`` and ``extra.by_context``.

Each ``by_context`` row, given the baseline pass's steps too, also holds the speedup *in that
bucket*: ``ms_per_token`` (speculative) and ``ms_per_token_baseline`` = the bucket's summed step
time over the tokens its rows emitted (ratio of sums over the bucket's rows; a baseline row emits one
token), ``speedup`` = their ratio, and ``speedup_ci_low`` / ``speedup_ci_high``: a percentile bootstrap
interval (``confidence``, default 95%) resampling the bucket's target iterations of each pass
independently (rows of one iteration share its forward, so the iteration is the unit). It is a
step-level estimator: prefill and queueing are not in it (the cell's ``speedup`` is TPOT's).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from ..records import StepRecord
from .acceptance import al_from_counts
from .timing import iteration_times, stats_ms

NAN = float("nan")


def context_bucket(context_len: int, edges: Sequence[int] = ()) -> int:
    """The lower edge (tokens) of the context bucket of a step; -1 unknown (or below the first edge).

    ``edges`` empty: powers of two; else sorted lower edges, the last open-ended."""
    if context_len < 0 or (not edges and context_len == 0):
        return -1
    if not edges:
        return 1 << (int(context_len).bit_length() - 1)
    i = bisect.bisect_right(list(edges), int(context_len)) - 1
    return int(edges[i]) if i >= 0 else -1


def check_edges(edges, where: str = "acceptance.context_edges") -> tuple[int, ...]:
    """``edges`` as a tuple of strictly increasing non-negative ints; ``ValueError`` naming ``where``."""
    out = tuple(edges or ())
    if not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in out):
        raise ValueError(f"{where}={list(out)!r}: lower edges must be integers >= 0 (tokens)")
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"{where}={list(out)!r}: lower edges must go strictly up")
    return out


def by_bucket(steps: Sequence[StepRecord], key) -> list[dict]:
    """Rows per bucket (``key(step)`` -> bucket; -1 = unknown, left out), sorted by bucket."""
    out = []
    for b, rows in sorted(_groups(steps, key).items()):
        drafts = [s for s in rows if s.drafted > 0]
        iters = iteration_times(rows)
        out.append({"bucket": b, "steps": len(rows), "drafts": len(drafts),
                    "al": al_from_counts(sum(s.accepted for s in drafts), len(drafts)),
                    "t_draft_ms": stats_ms([s.t_draft for s in iters])[0],
                    "t_verify_ms": stats_ms([s.t_verify for s in iters])[0],
                    "t_step_ms": stats_ms([s.t_step for s in iters])[0]})
    return out


def _groups(steps: Sequence[StepRecord], key) -> dict[int, list[StepRecord]]:
    groups: dict[int, list[StepRecord]] = {}
    for s in steps:
        b = key(s)
        if b >= 0:
            groups.setdefault(b, []).append(s)
    return groups


def _per_iteration(rows: Sequence[StepRecord]) -> np.ndarray:
    """(n_iterations, 2): per target iteration, the rows' summed step time (s) and emitted tokens."""
    acc: dict[tuple[int, int], list[float]] = {}
    for s in rows:
        if not math.isfinite(s.t_step):
            continue
        cell = acc.setdefault((s.repeat, s.iteration if s.iteration >= 0 else id(s)), [0.0, 0.0])
        cell[0] += s.t_step
        cell[1] += s.kept if s.kept >= 0 else s.emitted
    return np.array(list(acc.values()), dtype=float).reshape(-1, 2)


def bucket_speedup(base: Sequence[StepRecord], spec: Sequence[StepRecord], confidence: float = 0.95,
                   n_resamples: int = 1000, seed: int = 0) -> dict:
    """ms per token of each pass in one bucket, their ratio and its bootstrap interval (module doc)."""
    b, s = _per_iteration(base), _per_iteration(spec)
    if not len(b) or not len(s) or b[:, 1].sum() <= 0 or s[:, 1].sum() <= 0:
        return {"ms_per_token": NAN, "ms_per_token_baseline": NAN, "speedup": NAN,
                "speedup_ci_low": NAN, "speedup_ci_high": NAN}
    mb, ms = 1e3 * b[:, 0].sum() / b[:, 1].sum(), 1e3 * s[:, 0].sum() / s[:, 1].sum()
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, len(b), size=(n_resamples, len(b)))
    is_ = rng.integers(0, len(s), size=(n_resamples, len(s)))
    with np.errstate(divide="ignore", invalid="ignore"):
        rb = b[ib, 0].sum(1) / b[ib, 1].sum(1)
        rs = s[is_, 0].sum(1) / s[is_, 1].sum(1)
        boot = rb / rs
    boot = boot[np.isfinite(boot)]
    a = (1.0 - confidence) / 2
    if len(b) < 2 or len(s) < 2:  # one target iteration on a side: nothing to resample, no interval (never [x, x])
        boot = boot[:0]
    lo, hi = (float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))) if len(boot) else (NAN, NAN)
    return {"ms_per_token": ms, "ms_per_token_baseline": mb, "speedup": mb / ms,
            "speedup_ci_low": lo, "speedup_ci_high": hi}


def by_context(spec_steps: Sequence[StepRecord], base_steps: Sequence[StepRecord] = (), edges: Sequence[int] = (),
               confidence: float = 0.95, n_resamples: int = 1000) -> list[dict]:
    """``by_bucket`` over context buckets, with the bucket's paired speedup where baseline steps are given."""
    key = lambda s: context_bucket(s.context_len, edges)  # noqa: E731
    rows = by_bucket(spec_steps, key)
    if not base_steps:
        return rows
    base, spec = _groups(base_steps, key), _groups(spec_steps, key)
    for r in rows:
        r.update(bucket_speedup(base.get(r["bucket"], ()), spec[r["bucket"]], confidence, n_resamples))
        r["t_step_ms_baseline"] = stats_ms([s.t_step for s in iteration_times(base.get(r["bucket"], ()))])[0]
    return rows


def bucket_notes(spec_steps: Sequence[StepRecord], base_steps: Sequence[StepRecord] = (), edges: Sequence[int] = (),
                 confidence: float = 0.95, n_resamples: int = 1000) -> dict[str, list[dict]]:
    """``extra`` notes of a cell: acceptance and cost by live batch and by context (empty lists: not known)."""
    def clean(rows):
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]

    return {"by_live_batch": clean(by_bucket(spec_steps, lambda s: s.live_batch)),
            "by_context": clean(by_context(spec_steps, base_steps, edges, confidence, n_resamples))}
