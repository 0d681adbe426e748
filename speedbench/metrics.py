"""Every metric, defined once, with its convention beside it.

Acceptance conventions (as vLLM's counters and SPEED-Bench):
  * a *draft* is a target iteration in which at least one draft token was proposed;
    steps where a lookup drafter found nothing are not drafts (AL is conditional on a proposal);
  * AL = 1 + accepted / drafts  -- the target's own correction/bonus token is INCLUDED,
    so 1 <= AL <= 1 + D. ("Mean accepted tokens" in some tools is AL - 1.);
  * acceptance rate = accepted / drafted tokens (depends on D; AL is the headline);
  * per-position, unconditional: P(first k drafts all accepted) = #drafts with accepted >= k / drafts
    (vLLM's num_accepted_tokens_per_pos[k-1] / num_drafts);
  * per-position, conditional: P(k-th accepted | first k-1 accepted) = uncond[k] / uncond[k-1].
Timing conventions: seconds in records, milliseconds in the cell table; TTFT = submission to
first token; TPOT = (t_last - t_first) / (n_tokens - 1) per request; tokens/s per user =
1 / TPOT; speedup = median baseline TPOT / median speculative TPOT of matched runs.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .records import STATUS_OK, RequestRecord, StepRecord

NAN = math.nan


@dataclass(frozen=True)
class Acceptance:
    drafts: int
    drafted: int
    accepted: int
    hist: tuple[int, ...]  # hist[k] = drafts that accepted exactly k tokens

    @property
    def al(self) -> float:
        return 1.0 + self.accepted / self.drafts if self.drafts else NAN

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else NAN

    def per_position(self) -> tuple[float, ...]:
        """Unconditional P(accepted >= k) for k = 1..len(hist)-1."""
        if not self.drafts:
            return ()
        tail = np.cumsum(np.asarray(self.hist[::-1], dtype=float))[::-1]  # tail[k] = #drafts with accepted >= k
        return tuple(float(x) / self.drafts for x in tail[1:])

    def per_position_conditional(self) -> tuple[float, ...]:
        uncond = self.per_position()
        prev = (1.0,) + uncond[:-1]
        return tuple(u / p if p > 0 else NAN for u, p in zip(uncond, prev))


def acceptance(records: Iterable[RequestRecord], depth: int = 0) -> Acceptance:
    """Pool the counters of requests (failed ones excluded); histogram padded to ``depth + 1``."""
    drafts = drafted = accepted = 0
    hist = [0] * (depth + 1)
    for r in records:
        if r.status != STATUS_OK:
            continue
        drafts, drafted, accepted = drafts + r.n_drafts, drafted + r.drafted, accepted + r.accepted
        for k, n in enumerate(r.accepted_hist):
            if k >= len(hist):
                hist += [0] * (k + 1 - len(hist))
            hist[k] += n
    return Acceptance(drafts, drafted, accepted, tuple(hist))


def iteration_times(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """One record per target iteration: rows of a batch share a forward and its times."""
    seen, out = set(), []
    for s in steps:
        key = (s.t_draft, s.t_verify, s.t_accept, s.t_step)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def tokens_per_step(steps: Sequence[StepRecord]) -> float:
    """Mean tokens emitted per target iteration per sequence, no-proposal steps included."""
    return float(np.mean([s.emitted for s in steps])) if steps else NAN


def stats_ms(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, median, p90) in milliseconds over the measured values (NaN = not measured); NaN when none."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return NAN, NAN, NAN
    arr = np.asarray(values, dtype=float) * 1e3
    return float(arr.mean()), float(np.median(arr)), float(np.percentile(arr, 90))


def median(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.median(vals)) if vals else NAN


def iqr(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return NAN
    q75, q25 = np.percentile(vals, [75, 25])
    return float(q75 - q25)


def overhead_fraction(steps: Sequence[StepRecord]) -> float:
    """Loop time outside draft/verify/accept as a fraction of total step time."""
    total = sum(s.t_step for s in steps)
    inside = sum(s.t_draft + s.t_verify + s.t_accept for s in steps)
    return (total - inside) / total if total > 0 else NAN


def predicted_speedup(t_verify_base: float, t_verify_spec: float, t_draft: float, al: float) -> float:
    """docs/guidelines.md section 3.1: T_verif(B) * AL / (T_verif(B(1+D)) + T_draft(B, D))."""
    denom = t_verify_spec + t_draft
    if any(math.isnan(x) for x in (t_verify_base, t_verify_spec, t_draft, al)) or denom <= 0:
        return NAN
    return t_verify_base * al / denom


def low_latency_speedup(al: float, rho: float, depth: int) -> float:
    """docs/guidelines.md section 3.2, B -> 1: AL / (1 + rho * D), rho = L_draft / L_target."""
    return al / (1.0 + rho * depth)


@dataclass(frozen=True)
class Agreement:
    match_rate: float  # fraction of requests whose output equals the baseline's
    token_match_rate: float  # leading matched tokens / baseline tokens
    first_divergence: int  # smallest first-mismatch position over requests; -1 if none


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first differing token; -1 if equal (a length difference counts as a mismatch)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return -1 if len(a) == len(b) else min(len(a), len(b))


def agreement(baseline: Iterable[RequestRecord], other: Iterable[RequestRecord]) -> Agreement:
    """Token-level agreement of ``other`` with ``baseline``, matched by request id."""
    base = {r.request_id: r.output_ids for r in baseline if r.status == STATUS_OK}
    pairs = [(base[r.request_id], r.output_ids) for r in other if r.status == STATUS_OK and r.request_id in base]
    if not pairs:
        return Agreement(NAN, NAN, -1)
    firsts = [first_mismatch(a, b) for a, b in pairs]
    matched = sum(len(a) if f < 0 else f for (a, _), f in zip(pairs, firsts))
    total = sum(len(a) for a, _ in pairs)
    divergences = [f for f in firsts if f >= 0]
    return Agreement(
        match_rate=sum(f < 0 for f in firsts) / len(pairs),
        token_match_rate=matched / total if total else NAN,
        first_divergence=min(divergences) if divergences else -1,
    )
