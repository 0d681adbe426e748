"""Pieces every external-engine backend shares: per-turn results folded into records.

An engine backend (vLLM, a server, HF ``generate``) produces one :class:`TurnResult` per
request and turn; :func:`fold_turns` turns a request's turns into its ``RequestRecord`` and
``StepRecord`` rows with the same conventions as the reference engine:

* TTFT is the first turn's; TPOT = decode time / (tokens - 1), summed over turns;
* a *draft* is a step with at least one proposed token; ``accepted`` counts leading draft
  tokens accepted before any truncation at ``max_new_tokens``; the histogram is over drafts;
* a time an engine does not expose is NaN, never an estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..data.chat import render_conversation
from ..records import STATUS_FAILED, Request, RequestRecord, StepRecord

NAN = math.nan


@dataclass
class StepCounts:
    """One target iteration of one sequence as an engine reported it."""

    drafted: int
    accepted: int
    emitted: int = -1  # tokens the step emitted (accepted + 1 unless the engine says otherwise)
    t_step: float = NAN  # seconds; NaN where the engine gives no per-step time
    t_draft: float = NAN
    t_verify: float = NAN

    def __post_init__(self) -> None:
        if self.emitted < 0:
            self.emitted = self.accepted + 1


@dataclass
class TurnResult:
    """One request's answer to one user turn."""

    output_ids: list[int]
    prompt_tokens: int
    ttft: float  # seconds, submission -> first token
    decode_s: float  # seconds, first token -> last token
    e2e: float  # seconds, submission -> last token
    steps: list[StepCounts] | None = None  # None: the engine gave no per-step acceptance
    al_source: str = "steps"
    # pooled counters, for sources that give totals without per-step detail ("counters")
    n_drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    hist: list[int] = field(default_factory=list)
    # False: ``steps`` are timing rows only and acceptance comes from the pooled counts above
    counts_from_steps: bool = True


def add_hist(hist: list[int], k: int, n: int = 1) -> None:
    while len(hist) <= k:
        hist.append(0)
    hist[k] += n


def hist_from_per_pos(drafts: int, per_pos: Sequence[int]) -> list[int]:
    """Histogram of accepted counts from vLLM's per-position counters.

    ``per_pos[i]`` = drafts whose first i+1 tokens were all accepted, so the number of drafts
    that accepted exactly k tokens is per_pos[k-1] - per_pos[k] (with per_pos[-1] = drafts).
    """
    tail = [drafts, *per_pos, 0]
    return [max(tail[k] - tail[k + 1], 0) for k in range(len(per_pos) + 1)]


def fold_turns(
    req: Request, role: str, turns: list[TurnResult], batch_index: int = 0
) -> tuple[RequestRecord, list[StepRecord]]:
    """One request's turns as its request record and step rows."""
    output: list[int] = []
    steps: list[StepRecord] = []
    hist: list[int] = []
    n_drafts = drafted = accepted = 0
    decode_s, decode_tokens, e2e, prompt_tokens = 0.0, 0, 0.0, 0
    sources = {t.al_source for t in turns}
    for turn in turns:
        output += turn.output_ids
        prompt_tokens += turn.prompt_tokens
        e2e += turn.e2e
        if len(turn.output_ids) > 1:
            decode_s += turn.decode_s
            decode_tokens += len(turn.output_ids) - 1
        pooled = turn.steps is None or not turn.counts_from_steps
        if pooled:
            n_drafts, drafted, accepted = n_drafts + turn.n_drafts, drafted + turn.drafted, accepted + turn.accepted
            for k, n in enumerate(turn.hist):
                add_hist(hist, k, n)
        for s in turn.steps or ():
            steps.append(
                StepRecord(
                    request_id=req.request_id, step=len(steps), batch_index=batch_index, drafted=s.drafted,
                    accepted=s.accepted, emitted=s.emitted, t_draft=s.t_draft, t_verify=s.t_verify,
                    t_accept=NAN, t_step=s.t_step, verify_tokens=-1,
                )
            )
            if s.drafted > 0 and not pooled:
                n_drafts, drafted, accepted = n_drafts + 1, drafted + s.drafted, accepted + s.accepted
                add_hist(hist, s.accepted)
    record = RequestRecord(
        request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
        entropy_tier=req.entropy_tier, role=role, prompt_tokens=prompt_tokens, n_tokens=len(output),
        output_ids=tuple(output), ttft=turns[0].ttft if turns else NAN,
        tpot=decode_s / decode_tokens if decode_tokens > 0 else NAN, e2e=e2e,
        n_steps=len(steps), n_drafts=n_drafts, drafted=drafted, accepted=accepted, accepted_hist=tuple(hist),
        al_source=sources.pop() if len(sources) == 1 else ("none" if not sources else "+".join(sorted(sources))),
    )
    return record, steps


def failed_record(req: Request, role: str, exc: BaseException | str) -> RequestRecord:
    error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return RequestRecord(
        request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
        entropy_tier=req.entropy_tier, role=role, prompt_tokens=0, n_tokens=0, output_ids=(),
        ttft=NAN, tpot=NAN, e2e=NAN, n_steps=0, n_drafts=0, drafted=0, accepted=0, al_source="none",
        status=STATUS_FAILED, error=error,
    )


def run_conversations(
    batch: list[Request], tokenizer, run_turn: Callable[[list[list[int]]], list[TurnResult]]
) -> list[list[TurnResult]]:
    """Drive a static batch turn by turn: the engine's reply goes back as the assistant message.

    ``run_turn`` gets the prompt token ids of the rows still talking and returns one result per row.
    """
    history: list[list[tuple[str, str]]] = [[] for _ in batch]
    results: list[list[TurnResult]] = [[] for _ in batch]
    for turn in range(max(len(r.turns) for r in batch)):
        rows = [b for b, r in enumerate(batch) if len(r.turns) > turn]
        prompts = [render_conversation(tokenizer, history[b], batch[b].turns[turn], tokenize=True) for b in rows]
        outs = run_turn(prompts)
        for b, out in zip(rows, outs):
            history[b].append((batch[b].turns[turn], tokenizer.decode(out.output_ids, skip_special_tokens=True)))
            results[b].append(out)
    return results


def batches(requests: list[Request], size: int):
    for start in range(0, len(requests), size):
        yield requests[start : start + size]
