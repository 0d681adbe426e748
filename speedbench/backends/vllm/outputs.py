"""vLLM's ``RequestOutput`` as speedbench turn results: tokens, TTFT/decode times and acceptance.

Acceptance, in order of preference:
  * ``steps``: vLLM's per-request spec-decode metrics (``per_request_spec_decode_metrics=
    "detailed"``): accepted/proposed per verify step of each request;
  * ``counters``: the ``vllm:spec_decode_*`` counter delta over each batch, put on the first
    request of the batch (the others carry zeros), so pooled cell AL is right but per-request
    AL is not meaningful.
"""
from __future__ import annotations

from ..base import NAN, StepCounts, TurnResult, cut_to_output


def turn_result(prompt: list[int], out, speculative: bool, times: tuple[float, float] | None = None) -> TurnResult:
    """``times``: (TTFT, decode) measured by the caller (a stepped pass's own clock); else vLLM's metrics."""
    comp = out.outputs[0]
    m = out.metrics
    if times is not None:
        ttft, decode = times
    elif m is not None and m.num_generation_tokens > 0:
        ttft = float(m.first_token_latency)
        decode = float(m.last_token_ts - m.first_token_ts)  # both on the engine's monotonic clock
    else:
        ttft = decode = NAN
    result = TurnResult(list(comp.token_ids), len(prompt), ttft, decode, ttft + decode, steps=[], al_source="none")
    result.finish = {"stop": "stop", "length": "length"}.get(str(getattr(comp, "finish_reason", "") or ""), "")
    if not speculative:
        result.chunks = [1] * len(comp.token_ids)  # one token per step without speculation
        return result
    sd = getattr(comp, "spec_decode_metrics", None)
    if sd is None:
        result.steps, result.al_source = None, "counters"
    elif sd.per_step_drafted:
        result.steps = [StepCounts(d, a) for d, a in zip(sd.per_step_drafted, sd.per_step_accepted)]
        result.al_source = "steps"
        # counts are before truncation; where they account for the output (every step listed, i.e. every
        # step proposed), the kept tokens follow from its length; else kept stays unknown (= emitted)
        if cut_to_output(result.steps, len(comp.token_ids), lead=1):
            result.chunks = [1] + [s.kept for s in result.steps if s.kept > 0]
    else:  # summary level: totals and histogram, no per-step rows
        result.steps, result.al_source = None, "steps"
        result.n_drafts = sum(sd.histogram)
        result.drafted = sd.num_draft_tokens
        result.accepted = sum(j * n for j, n in enumerate(sd.histogram))
        result.hist = list(sd.histogram)
    return result


def put_counters_on_first(turns: list[list[TurnResult]], delta) -> None:  # [request][turn]
    """Counter deltas cover the whole batch: the first request carries them, the rest carry zeros."""
    first = True
    for req_turns in turns:
        for t in req_turns:
            if t.al_source != "counters":
                continue
            if first and delta is not None:
                t.n_drafts, t.drafted, t.accepted, t.hist = delta.drafts, delta.draft_tokens, delta.accepted, delta.hist()
                first = False
            elif delta is None:
                t.al_source = "none"


def describe(sources: set[str]) -> str:
    if sources == {"steps"}:
        return "per-request vLLM spec-decode metrics (per verify step; steps without a proposal are not listed)"
    if sources == {"counters"}:
        return ("vllm:spec_decode_* counter deltas per batch, carried by the batch's first request: "
                "pooled AL is exact, per-request AL is not")
    return f"mixed/unavailable: {sorted(sources)}"
