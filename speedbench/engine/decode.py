"""The decode loop: one copy for plain and speculative decoding.

Plain decoding is the ``none`` drafter (it proposes nothing), so baseline and speculative
runs go through the same loop, the same token counting and the same clocks. Each target
iteration is split into three timed phases, read on a device-synced clock around the calls:

    draft   = drafter.propose(...)
    verify  = one target forward over [last token, drafts]   (B * (1 + D) tokens in flight)
    accept  = acceptance rule + cache roll-back + history update
    step    = the whole iteration, including the loop's own bookkeeping (harness overhead)

The first three are :func:`speculative_step`, one function a reader can check against the papers;
:func:`generate` is the loop around it (prefill, stop rules, per-row records, clocks).

Between iterations the loop calls ``clock.checkpoint``: in a lockstep (``engine.clock``) the
partner pass may run there, on a clock of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .schedule import as_plan, k_at
from .drafting import Drafter, History
from .cached_lm import CachedLM
from .clock import Clock
from .sampling import SamplingParams, next_token
from .speculative import Verdict, verify


@dataclass
class StepTiming:
    t_draft: float
    t_verify: float
    t_accept: float
    t_step: float
    verify_tokens: int


@dataclass
class RowStep:
    step: int
    drafted: int
    accepted: int
    kept: int = 0  # tokens of this step the output kept (< accepted + 1 when a stop token or the length cut it)


@dataclass
class BatchOutput:
    outputs: list[list[int]]
    prompt_lens: list[int]
    t_start: float
    t_first: float  # every row's first token comes out of the (batched) prefill
    t_last: list[float]
    steps: list[StepTiming] = field(default_factory=list)
    row_steps: list[list[RowStep]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)  # per row: "stop" (a stop token) | "length" (max_new_tokens)


@dataclass
class Step:
    """What one :func:`speculative_step` did, per row, and when its phases ended."""

    emitted: list[list[int]]  # tokens the step appended (accepted drafts + the target's own); [] for a finished row
    drafted: list[int]
    accepted: list[int]
    width: int  # D of the verify forward (B * (1 + width) tokens in flight)
    t_drafted: float
    t_verified: float
    t_accepted: float


def speculative_step(target: CachedLM, drafter: Drafter, history: History, k: int, active: torch.Tensor,
                     params: SamplingParams, generator: torch.Generator | None, clock: Clock,
                     acceptance=None) -> Step:
    """Draft ``k`` tokens per row, verify them in one target forward, accept, roll the cache back.

    Rows where ``active`` is False ride along in the forward but emit nothing. ``acceptance``
    (synthetic acceptance) replaces the verdict after the real forward (not lossless).
    """
    rows = torch.arange(history.tokens.shape[0], device=history.tokens.device)
    proposal = drafter.propose(history, k, params, generator)
    t_drafted = clock.now()
    last = history.tokens[rows, history.lens - 1]
    logits = target.forward(torch.cat([last[:, None], proposal.tokens], 1))
    if drafter.feature_layers:  # the target's features are part of its forward (as in vLLM)
        drafter.observe(target.captured, history.lens - 1)
    t_verified = clock.now()
    verdict = verify(proposal, logits, params, generator)
    if acceptance is not None:  # synthetic acceptance: the forward ran; the decision is drawn
        forced = acceptance.draw(proposal.n_proposed, active)
        verdict = Verdict(forced, next_token(logits[rows, forced], params, generator))
    n_acc = torch.where(active, verdict.n_accepted, torch.zeros_like(verdict.n_accepted))
    emitted = torch.cat([proposal.tokens, torch.zeros_like(last)[:, None]], 1)
    emitted[rows, n_acc] = verdict.next_token
    counts = torch.where(active, n_acc + 1, torch.zeros_like(n_acc))
    target.truncate(history.lens - 1 + counts)  # roll back: the cache keeps only the accepted positions
    history.append(emitted, counts)
    drafter.accepted(n_acc, history)
    t_accepted = clock.now()
    kept = [tokens[:n] for tokens, n in zip(emitted.tolist(), counts.tolist())]
    return Step(kept, proposal.n_proposed.tolist(), n_acc.tolist(), proposal.width, t_drafted, t_verified, t_accepted)


def generate(
    target: CachedLM,
    drafter: Drafter,
    prompts: list[list[int]],
    num_speculative_tokens: int,
    max_new_tokens: int,
    params: SamplingParams,
    stop_ids: set[int],
    clock: Clock,
    generator: torch.Generator | None = None,
    acceptance=None,
    schedule=(),
) -> BatchOutput:
    """Generate up to ``max_new_tokens`` per prompt for one static batch.

    ``schedule`` (``engine.schedule.parse_plan``: context ranges of (start, end, K) batch ranges): each
    iteration drafts the K of the batch range holding its live batch size (rows still generating) in
    the context range holding its live context (the longest live row), clamped to
    ``num_speculative_tokens``; K=0 is a plain decode step (recorded, with drafted=0).

    ``acceptance`` (``engine.synthetic_acceptance.SyntheticAcceptance``): force each step's
    accepted count after the real verification forward (cost-surface cells; not lossless).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch, depth, schedule = len(prompts), num_speculative_tokens, as_plan(schedule)
    clock.begin()
    t_start = clock.now()
    history, first = _prefill(target, drafter, prompts, max_new_tokens + 2 * depth + 3, params, generator)
    t_first = clock.now()
    outputs = [[tok] for tok in first]
    finish = ["stop" if o[0] in stop_ids else "length" if max_new_tokens <= 1 else "" for o in outputs]
    out = BatchOutput(outputs, [len(p) for p in prompts], t_start, t_first, [t_first] * batch, [],
                      [[] for _ in range(batch)], finish)
    step, t_prev = 0, t_first

    def progress() -> float:
        return sum(1.0 if finish[b] else len(outputs[b]) / max_new_tokens for b in range(batch)) / batch

    clock.checkpoint(progress())  # a lockstep partner may take its turn here (own clocks: not timed)
    while not all(finish):
        live = [not f for f in finish]
        k = k_at(schedule, sum(live), _live_context(history, live, schedule), depth) if schedule else depth
        taken = speculative_step(target, drafter, history, k, torch.tensor(live, device=target.device),
                                params, generator, clock, acceptance)
        for b in (b for b in range(batch) if live[b]):
            out.row_steps[b].append(_keep(out, b, taken, step, stop_ids, max_new_tokens))
        t_end = clock.now()
        out.steps.append(StepTiming(t_draft=taken.t_drafted - t_prev, t_verify=taken.t_verified - taken.t_drafted,
                                    t_accept=taken.t_accepted - taken.t_verified, t_step=t_end - t_prev,
                                    verify_tokens=batch * (1 + taken.width)))
        t_prev, step = t_end, step + 1
        clock.checkpoint(progress())
    return out


def _live_context(history: History, live: list[bool], schedule) -> int:
    """The longest live row's tokens (what a context range of the schedule is keyed on); 0 with one range."""
    if len(schedule) < 2:
        return 0
    return int(max(n for n, on in zip(history.lens.tolist(), live) if on))


def _prefill(target: CachedLM, drafter: Drafter, prompts: list[list[int]], room: int, params: SamplingParams,
             generator: torch.Generator | None) -> tuple[History, list[int]]:
    """The batched prefill: the history holding the prompts and each row's first token.

    A row that finished still rides along in the batched verify forward until every row is
    done: its history can end up to D tokens past max_new_tokens (the last step emitted
    D + 1 tokens) and each later forward writes 1 + D more positions after that, so the
    cache needs ``room`` = max_new_tokens + 2D (+3 spare) positions past the longest prompt.
    """
    device, batch = target.device, len(prompts)
    capacity = max(len(p) for p in prompts) + room
    history = History(batch, capacity, device)
    rows_t = [torch.tensor(p, dtype=torch.long, device=device) for p in prompts]
    for b, r in enumerate(rows_t):
        history.tokens[b, : len(r)] = r
    history.lens = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    target.capture = drafter.feature_layers
    target.reset(batch, capacity)
    drafter.reset(history, capacity)
    first = next_token(target.feed_ragged(rows_t), params, generator)
    if drafter.feature_layers:
        drafter.observe(target.captured, torch.zeros(batch, dtype=torch.long, device=device))
    history.append(first[:, None], torch.ones(batch, dtype=torch.long, device=device))
    return history, first.tolist()


def _keep(out: BatchOutput, b: int, taken: Step, step: int, stop_ids: set[int], max_new_tokens: int) -> RowStep:
    """Row ``b``'s output keeps the step's tokens up to a stop token or the length; its record."""
    row = RowStep(step, taken.drafted[b], taken.accepted[b])
    for tok in taken.emitted[b]:
        out.outputs[b].append(tok)
        row.kept += 1
        if tok in stop_ids or len(out.outputs[b]) >= max_new_tokens:
            out.finish[b] = "stop" if tok in stop_ids else "length"
            out.t_last[b] = taken.t_accepted
            break
    return row
