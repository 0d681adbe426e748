"""The predicted speedup from measured step times (docs/guidelines.md section 3).

``speedup_predicted``: the speedup estimator (``speedup.paired_speedup``) over per-(request,
repeat) predictions from the same pairs' measured step times; when the split comes from a
separately timed pass (``timing.timed_split``), the prediction from its per-part means and the
measured pass's tokens per step. AL drives the prediction only where every step drafts;
tokens/step is the general form.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..records import StepRecord
from .speedup import matrix, paired_speedup
from .timing import other_time, timed_split, tokens_per_step
from ..columns import PredictionColumns

NAN = math.nan


def predicted_speedup(t_verify_base: float, t_verify_spec: float, t_draft: float, al: float,
                      t_accept_base: float = 0.0, t_accept_spec: float = 0.0,
                      t_other_base: float = 0.0, t_other_spec: float = 0.0) -> float:
    """docs/guidelines.md section 3.1:
    (T_verif(B) + T_other) * AL / (T_verif(B(1+D)) + T_draft(B, D) + T_other').

    A verification is the target's forward plus its acceptance rule (sampling, rejection,
    cache roll-back: ``t_accept``), as in vLLM's runner; an engine whose split has no separate
    acceptance time passes 0 and folds it into ``t_verify``. ``T_other`` / ``T_other'``: the
    engine's per-step work outside the forwards (scheduling, sampling set-up, output processing,
    the harness loop) on the baseline's and the speculative side, measured from the same steps:
    in the baseline's time per token, shared over AL tokens on the speculative side. 0 where an
    engine does not time it (the formula without it).
    """
    base = t_verify_base + t_accept_base + t_other_base
    denom = t_verify_spec + t_accept_spec + t_draft + t_other_spec
    if any(math.isnan(x) for x in (base, denom, al)) or denom <= 0:
        return NAN
    return base * al / denom


def low_latency_speedup(al: float, rho: float, depth: int) -> float:
    """docs/guidelines.md section 3.2, B -> 1: AL / (1 + rho * D), rho = L_draft / L_target."""
    return al / (1.0 + rho * depth)


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else NAN


def _or_zero(x: float) -> float:
    """A phase the engine did not time (NaN) costs nothing extra in the prediction."""
    return 0.0 if math.isnan(x) else x


def predicted_ratios(base_steps: Sequence[StepRecord], spec_steps: Sequence[StepRecord]) -> np.ndarray:
    """Per (request, repeat): (T_verif(B) + T_other) * tokens/step / (T_verif(B(1+D)) + T_draft(B, D) + T_other')
    from that pair's steps (each verification with its acceptance step, ``predicted_speedup``; tokens/step
    counts the tokens the output kept, ``tokens_per_step``). With every part of every step timed, this is
    the measured TPOT ratio of the pair rebuilt from its parts."""
    def group(steps):
        out: dict = {}
        for s in steps:
            out.setdefault((s.request_id, s.repeat), []).append(s)
        return out

    gb, gs = group(base_steps), group(spec_steps)
    values = {}
    for key in gb.keys() & gs.keys():
        vb, vs = _mean([s.t_verify for s in gb[key]]), _mean([s.t_verify for s in gs[key]])
        if math.isnan(vb) or math.isnan(vs):
            continue

        # the baseline's own draft phase (an engine that runs plain decoding through its drafting loop
        # with no drafter spends a little there) is per-step work outside its forward: its T_other
        base_other = _or_zero(max(other_time(gb[key]), 0.0)) + _or_zero(_mean([s.t_draft for s in gb[key]]))
        values[key] = predicted_speedup(vb, vs, _or_zero(_mean([s.t_draft for s in gs[key]])), tokens_per_step(gs[key]),
                                        _or_zero(_mean([s.t_accept for s in gb[key]])),
                                        _or_zero(_mean([s.t_accept for s in gs[key]])),
                                        base_other, _or_zero(max(other_time(gs[key]), 0.0)))
    return matrix(values) if values else np.empty((0, 0))


def prediction_columns(base, spec, confidence: float = 0.95) -> PredictionColumns:
    """The predicted speedup of a cell from its matched passes (``GenerateOutput``s)."""
    parts = timed_split(base, spec)
    if parts is None:
        return PredictionColumns(speedup_predicted=paired_speedup(predicted_ratios(base.steps, spec.steps), confidence, 0).point)
    split, base_split = parts
    return PredictionColumns(speedup_predicted=predicted_speedup(
        base_split.get("verify", NAN), split["verify"], split["draft"], tokens_per_step(spec.steps),
        base_split.get("accept", 0.0), split["accept"],
        _or_zero(base_split.get("other", NAN)) + _or_zero(base_split.get("draft", NAN)), _or_zero(split.get("other", NAN))))
