"""Acceptance and speedup per agentic trajectory turn (``data.agentic``: requests ``<id>@turn<k>``).

Per cut k, over the cell's requests that are that cut: ``n`` requests, ``context_tokens`` (mean
prompt tokens: the trajectory so far), ``al`` = 1 + accepted / drafting steps (pooled),
``speedup`` = the geometric mean over the turn's requests of baseline TPOT / speculative TPOT
(each request's repeats averaged first) and ``speedup_ci_low`` / ``speedup_ci_high``: a percentile
bootstrap interval over the turn's requests (95%). A cell keeps the rows in ``extra.by_turn``
(absent when no request is a cut).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..data.agentic import turn_of
from ..records import RequestRecord
from .acceptance import al_from_counts


def _mean_tpot(records: Sequence[RequestRecord]) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for r in records:
        if math.isfinite(r.tpot) and r.tpot > 0:
            acc.setdefault(r.request_id, []).append(r.tpot)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def turn_rows(base: Sequence[RequestRecord], spec: Sequence[RequestRecord], confidence: float = 0.95,
              n_resamples: int = 1000) -> list[dict]:
    turns: dict[int, list[RequestRecord]] = {}
    for r in spec:
        k = turn_of(r.request_id)
        if k >= 0:
            turns.setdefault(k, []).append(r)
    tb = _mean_tpot(base)
    out = []
    for k in sorted(turns):
        rows = turns[k]
        ts = _mean_tpot(rows)
        ratios = np.array([tb[i] / ts[i] for i in ts if i in tb])
        lo = hi = s = None
        if len(ratios):
            logs = np.log(ratios)
            s = float(np.exp(logs.mean()))
        if len(ratios) > 1:  # one request: nothing to resample, no interval (never [s, s])
            boot = np.exp(logs[np.random.default_rng(k).integers(0, len(logs), (n_resamples, len(logs)))].mean(1))
            a = (1 - confidence) / 2
            lo, hi = float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))
        al = al_from_counts(sum(r.accepted for r in rows), sum(r.n_drafts for r in rows))
        out.append({"turn": k, "n": len({r.request_id for r in rows}),
                    "context_tokens": float(np.mean([r.prompt_tokens for r in rows])),
                    "al": None if math.isnan(al) else al, "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi})
    return out


def turn_notes(base: Sequence[RequestRecord], spec: Sequence[RequestRecord], confidence: float = 0.95,
               n_resamples: int = 1000) -> dict[str, list[dict]]:
    rows = turn_rows(base, spec, confidence, n_resamples)
    return {"by_turn": rows} if rows else {}
