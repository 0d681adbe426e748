"""Token-level agreement of a speculative pass with the baseline's outputs (greedy decoding is lossless)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..records import STATUS_OK, RequestRecord
from ..columns import AgreementColumns

NAN = math.nan


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


def agreement_columns(baseline: Sequence[RequestRecord], spec: Sequence[RequestRecord], greedy: bool) -> AgreementColumns:
    """Every repeat of the speculative pass against the baseline's first repeat (its tokens); only
    greedy decoding is expected to agree, so sampled cells get NaN / -1."""
    ok_b = [r for r in baseline if r.status == STATUS_OK]
    first_b = [r for r in ok_b if r.repeat == min((x.repeat for x in ok_b), default=0)]
    agree = agreement(first_b, spec)
    if not greedy:
        return AgreementColumns()  # the declared defaults: NaN, NaN, -1
    return AgreementColumns(greedy_match_rate=agree.match_rate, token_match_rate=agree.token_match_rate,
                            first_divergence=agree.first_divergence)
