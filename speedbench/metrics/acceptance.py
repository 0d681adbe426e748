"""Acceptance: AL on every peer's convention, rates, per-position and per-turn curves.

Acceptance conventions (as vLLM's counters and SPEED-Bench):
  * a *draft* is a target iteration in which at least one draft token was proposed;
    steps where a lookup drafter found nothing are not drafts (AL is conditional on a proposal);
  * AL = 1 + accepted / drafts  -- the target's own correction/bonus token is INCLUDED,
    so 1 <= AL <= 1 + D. ("Mean accepted tokens" in some tools is AL - 1.);
  * acceptance rate = accepted / drafted tokens (depends on D; AL is the headline);
  * per-position, unconditional: P(first k drafts all accepted) = #drafts with accepted >= k / drafts
    (vLLM's num_accepted_tokens_per_pos[k-1] / num_drafts);
  * per-position, conditional: P(k-th accepted | first k-1 accepted) = uncond[k] / uncond[k-1].
AL on each peer's convention (docs/acceptance.md; the same engine steps, different counting):
  * ``al``: pooled 1 + accepted / drafts over the cell's requests (vLLM's counters); accepted
    drafts count even in a step whose output a stop token or max_new_tokens cut;
  * ``al_request_mean``: the mean over requests of each request's AL (1 + accepted / drafts of
    that request, its repeats pooled): every prompt weighs the same (vLLM #42690's ask);
  * ``al_emitted``: pooled kept / drafts, where kept = the tokens of each drafting step that the
    output kept (accepted + 1 unless a stop token or max_new_tokens cut the step): <= ``al``;
    NaN when any request's engine did not say what was kept (pooled counters or histograms);
  * ``al_speed_bench``: the SPEED-Bench tool's AL (NVIDIA Model-Optimizer
    ``examples/specdec_bench``, metrics ``SpecBench``): per turn, the token count of every
    streamed chunk that carried tokens, the first (prefill) chunk included, the last chunk less
    the stop token when the turn ended on one (dropped if nothing else is left), no drafting
    condition (a step where nothing was proposed is a chunk of 1); a request's AL = the mean of
    its chunk counts over all its turns; the cell's AL = the mean over its requests;
  * ``al_by_position`` / ``al_by_turn``: ``al``'s convention on the drafts whose first token
    falls in each window of ``acceptance.window`` output positions (within the turn's reply) /
    in each user turn.

``acceptance_columns`` gives a cell's acceptance columns (``AcceptanceColumns``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import AcceptanceConfig
from ..records import STATUS_OK, RequestRecord, StepRecord
from ..columns import AcceptanceColumns

NAN = math.nan


def al_from_counts(accepted, drafts):
    """AL = 1 + accepted / drafts (bonus token included); NaN where nothing was drafted.

    Works on scalars and on numpy arrays (the gate's bootstrap evaluates it per resample).
    """
    if np.ndim(accepted) == 0 and np.ndim(drafts) == 0:
        return 1.0 + float(accepted) / float(drafts) if drafts else NAN
    drafts = np.asarray(drafts, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(drafts > 0, 1.0 + np.asarray(accepted, dtype=float) / drafts, np.nan)


@dataclass(frozen=True)
class Acceptance:
    drafts: int
    drafted: int
    accepted: int  # as the engine counts them: also drafts the output did not keep
    hist: tuple[int, ...]  # hist[k] = drafts that accepted exactly k tokens
    kept: int = -1  # tokens of the drafting steps the output kept; -1 when any request does not say
    accepted_kept: int = -1  # accepted drafts the output kept; -1 when any request does not say

    @property
    def al(self) -> float:
        return al_from_counts(self.accepted, self.drafts)

    @property
    def al_emitted(self) -> float:
        """Emitted-token AL: kept tokens per draft (a step cut by a stop token or the length counts what was kept);
        NaN when the engine did not say what was kept (never silently equal to ``al``)."""
        return self.kept / self.drafts if self.drafts and self.kept >= 0 else NAN

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
    drafts = drafted = accepted = kept = accepted_kept = 0
    kept_known = True
    hist = [0] * (depth + 1)
    for r in records:
        if r.status != STATUS_OK:
            continue
        drafts, drafted, accepted = drafts + r.n_drafts, drafted + r.drafted, accepted + r.accepted
        kept += r.kept if r.kept >= 0 else r.n_drafts + r.accepted  # not known: as the engine counted
        accepted_kept += r.accepted_kept if r.accepted_kept >= 0 else r.accepted
        kept_known = kept_known and (r.kept >= 0 or r.n_drafts == 0)
        for k, n in enumerate(r.accepted_hist):
            if k >= len(hist):
                hist += [0] * (k + 1 - len(hist))
            hist[k] += n
    return Acceptance(drafts, drafted, accepted, tuple(hist), kept if kept_known else -1, accepted_kept if kept_known else -1)


def _ok(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.status == STATUS_OK]


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else NAN


def al_request_mean(records: Iterable[RequestRecord]) -> float:
    """Mean over requests of each request's AL (1 + accepted / drafts; its repeats pooled)."""
    per: dict[str, list[int]] = {}
    for r in _ok(records):
        acc = per.setdefault(r.request_id, [0, 0])
        acc[0], acc[1] = acc[0] + r.accepted, acc[1] + r.n_drafts
    return _mean([al_from_counts(a, d) for a, d in per.values()])


def speed_bench_turn_lengths(chunks: Sequence[int], finish: str) -> list[int]:
    """The chunk lengths the SPEED-Bench tool counts for one turn's stream.

    Every chunk that carried tokens counts (the prefill's chunk too); when the turn ended on a
    stop token that token is taken off the last chunk, and a last chunk that held only the stop
    token is dropped.
    """
    out = [int(n) for n in chunks if n > 0]
    if out and finish == "stop":
        out[-1] -= 1
        if out[-1] == 0:
            out.pop()
    return out


def speed_bench_lengths(record: RequestRecord) -> list[int] | None:
    """All chunk lengths the SPEED-Bench tool counts for a request (its turns chained); None: no stream known."""
    if not record.chunks or sum(record.turn_chunks) != len(record.chunks):
        return None
    out, start = [], 0
    finish = tuple(record.turn_finish) + ("",) * (len(record.turn_chunks) - len(record.turn_finish))
    for n, fin in zip(record.turn_chunks, finish):
        out += speed_bench_turn_lengths(record.chunks[start : start + n], fin)
        start += n
    return out


def al_speed_bench(records: Iterable[RequestRecord]) -> float:
    """The SPEED-Bench tool's AL: mean over requests of the mean counted chunk length of each request
    (its repeats chained, as one more turn would be). NaN when any request's stream is not known;
    a request with no counted chunk (its only token a stop token) is left out."""
    per: dict[str, list[int]] = {}
    for r in _ok(records):
        lengths = speed_bench_lengths(r)
        if lengths is None:
            return NAN
        per.setdefault(r.request_id, []).extend(lengths)
    als = [float(np.mean(v)) for v in per.values() if v]
    return float(np.mean(als)) if als else NAN

def al_along_output(steps: Sequence[StepRecord], window: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(AL, drafts) per window of ``window`` output positions (by each draft's first token, within its turn)."""
    acc: dict[int, list[int]] = {}
    for s in steps:
        if s.drafted > 0 and s.position >= 0:
            a = acc.setdefault(s.position // window, [0, 0])
            a[0], a[1] = a[0] + s.accepted, a[1] + 1
    if not acc:
        return (), ()
    bins = range(max(acc) + 1)
    return (tuple(al_from_counts(*acc.get(b, (0, 0))) for b in bins),
            tuple(acc.get(b, (0, 0))[1] for b in bins))


def al_by_turn(steps: Sequence[StepRecord]) -> tuple[float, ...]:
    """AL per user turn (``al``'s convention) from the per-step rows."""
    acc: dict[int, list[int]] = {}
    for s in steps:
        if s.drafted > 0:
            a = acc.setdefault(s.turn, [0, 0])
            a[0], a[1] = a[0] + s.accepted, a[1] + 1
    return tuple(al_from_counts(*acc.get(t, (0, 0))) for t in range(max(acc) + 1)) if acc else ()


def auto_window(longest: int, bins: int = 8, largest: int = 16) -> int:
    """Positions per bin of AL along the output when ``acceptance.window`` is unset: about ``bins`` bins over
    an output of ``longest`` tokens (the run's max_new_tokens, so every cell of a run bins alike), at most
    ``largest`` positions each (32 tokens: 8 bins of 4)."""
    return max(1, min(largest, -(-int(longest) // bins)))


def acceptance_columns(records: Sequence[RequestRecord], steps: Sequence[StepRecord], depth: int,
                       cfg=None, max_new_tokens: int | None = None) -> AcceptanceColumns:
    """The acceptance columns of a cell on every convention (``cfg``: ``config.AcceptanceConfig``)."""
    ok = _ok(records)
    acc = acceptance(ok, depth)
    asked = (cfg if cfg is not None else AcceptanceConfig()).window
    longest = max_new_tokens or max((s.position + max(s.kept, 0) for s in steps if s.position >= 0), default=0)
    window = int(asked) if asked is not None else auto_window(longest)
    by_pos, drafts_pos = al_along_output(steps, window)
    return AcceptanceColumns(
        al=acc.al,
        al_request_mean=al_request_mean(ok),
        al_emitted=acc.al_emitted,
        al_speed_bench=al_speed_bench(ok),
        acceptance_rate=acc.rate,
        accepted_per_pos=acc.per_position(),
        accepted_per_pos_cond=acc.per_position_conditional(),
        accepted_hist=acc.hist,
        n_accepted=acc.accepted,
        n_accepted_kept=acc.accepted_kept,
        al_window=window,
        al_by_position=by_pos,
        drafts_by_position=drafts_pos,
        al_by_turn=al_by_turn(steps),
    )
