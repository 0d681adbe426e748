"""``backend=synthetic``: records from a seeded model of speculative decoding, no model loaded.

It lets every report, planner and gate path run without weights, a tokenizer or a device.
The records have exactly the torch backend's shapes; their contents come from a model:

* acceptance: each draft token is accepted with probability ``alpha`` (per category and/or
  method, from ``backend.options``), drafts accepted left to right until the first rejection,
  so AL(D) = (1 - alpha^(D+1)) / (1 - alpha) in expectation;
* times (milliseconds, simulated, no sleeping): ``t_verify = a + b * B * (1 + D)
  [+ e * B * context / 1000]``, ``t_draft = c * D`` (``c`` per method), a prefill of
  ``p * B * prompt_tokens`` for the first token;
* outputs: a token sequence fixed by the request id, the same with and without speculation
  (speculative decoding is lossless by construction here).

Options (``backend.options``; every one optional):

    alpha: 0.7                      per-token acceptance
    alpha_by_category: {coding: 0.85, writing: 0.5}
    alpha_by_method: {ngram: 0.5}   multiplies the category's alpha
    verify_a_ms: 2.0                fixed cost of one target forward
    verify_b_ms: 0.05               cost per token in flight
    verify_ctx_ms: 0.0              per sequence and 1000 context tokens (attention)
    draft_ms: 0.2                   per draft token (c)
    draft_ms_by_method: {ngram: 0.01}
    parallel_methods: [dflash]      draft all D tokens in one step of c
    propose_prob_by_method: {ngram: 0.8}   chance a step has a proposal at all
    accept_ms: 0.05, overhead_ms: 0.02, prefill_ms_per_token: 0.01
    chars_per_token: 4              prompt tokens = characters / chars_per_token
    noise: 0.0                      relative log-normal jitter on every time
    seed: 0
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records import Request, RequestRecord, StepRecord
from .base import Backend, GenerateOutput, GenerateSpec

DEFAULTS: dict[str, Any] = dict(
    alpha=0.7, alpha_by_category={}, alpha_by_method={}, verify_a_ms=2.0, verify_b_ms=0.05, verify_ctx_ms=0.0,
    draft_ms=0.2, draft_ms_by_method={}, parallel_methods=["dflash", "medusa"], propose_prob_by_method={},
    accept_ms=0.05, overhead_ms=0.02, prefill_ms_per_token=0.01, chars_per_token=4, noise=0.0, seed=0,
)
VOCAB = 256


@dataclass(frozen=True)
class SyntheticModel:
    """The options, typed; times in milliseconds."""

    alpha: float
    alpha_by_category: dict
    alpha_by_method: dict
    verify_a_ms: float
    verify_b_ms: float
    verify_ctx_ms: float
    draft_ms: float
    draft_ms_by_method: dict
    parallel_methods: tuple
    propose_prob_by_method: dict
    accept_ms: float
    overhead_ms: float
    prefill_ms_per_token: float
    chars_per_token: float
    noise: float
    seed: int

    @staticmethod
    def from_options(options: dict) -> "SyntheticModel":
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"backend.options: unknown synthetic option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        merged = {**DEFAULTS, **dict(options)}
        merged["parallel_methods"] = tuple(merged["parallel_methods"])
        for key in ("alpha_by_category", "alpha_by_method", "draft_ms_by_method", "propose_prob_by_method"):
            merged[key] = dict(merged[key])
        return SyntheticModel(**merged)

    def acceptance(self, category: str, method: str) -> float:
        a = float(self.alpha_by_category.get(category, self.alpha)) * float(self.alpha_by_method.get(method, 1.0))
        return min(max(a, 0.0), 0.999)

    def t_verify_ms(self, batch: int, depth: int, context: float) -> float:
        return self.verify_a_ms + self.verify_b_ms * batch * (1 + depth) + self.verify_ctx_ms * batch * context / 1000

    def t_draft_ms(self, method: str, depth: int) -> float:
        if depth == 0:
            return 0.0
        c = float(self.draft_ms_by_method.get(method, self.draft_ms))
        return c if method in self.parallel_methods else c * depth


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little")


def _output_ids(seed: int, request_id: str, turn: int, n: int) -> list[int]:
    rng = np.random.default_rng(_seed(seed, "out", request_id, turn))
    return rng.integers(0, VOCAB, size=n).tolist()


class SyntheticBackend(Backend):
    name = "synthetic"

    def __init__(self, run) -> None:
        super().__init__(run)
        self.model = SyntheticModel.from_options(run.backend.options)

    def check(self, drafter) -> None:  # every method is a name here: the model only needs alpha and c
        SyntheticModel.from_options(self.run.backend.options)

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "synthetic", "device": "synthetic", "model": "seeded cost/acceptance model"}

    def generate(self, requests: list[Request], spec: GenerateSpec) -> GenerateOutput:
        m = SyntheticModel.from_options(self.run.backend.options)
        clock = _SimClock(m.noise, _seed(m.seed, spec.role, spec.drafter.name, spec.drafter.num_speculative_tokens))
        records: list[RequestRecord] = []
        steps: list[StepRecord] = []
        for start in range(0, len(requests), spec.batch_size):
            batch = requests[start : start + spec.batch_size]
            recs, st = self._batch(batch, spec, m, clock)
            records += recs
            steps += st
        return GenerateOutput(records, steps, clock.t / 1e3, {"synthetic": True})

    def _batch(self, batch: list[Request], spec: GenerateSpec, m: SyntheticModel, clock: "_SimClock"):
        depth = spec.drafter.num_speculative_tokens
        method = spec.drafter.method
        n_turns = max(len(r.turns) for r in batch)
        state = [_RowState() for _ in batch]
        for turn in range(n_turns):
            rows = [b for b, r in enumerate(batch) if len(r.turns) > turn]
            for b in rows:  # the turn's prompt: the conversation so far plus this user turn
                state[b].context += max(1, math.ceil(len(batch[b].turns[turn]) / m.chars_per_token))
                state[b].prompt_tokens += state[b].context - state[b].context_fed
                state[b].context_fed = state[b].context
            t_start = clock.t
            clock.tick(m.prefill_ms_per_token * sum(state[b].context for b in rows))
            t_first = clock.t
            targets = {b: spec.max_new_tokens for b in rows}
            got = {b: 1 for b in rows}
            for b in rows:
                state[b].ttft = t_first - t_start if math.isnan(state[b].ttft) else state[b].ttft
                state[b].output += _output_ids(m.seed, batch[b].request_id, turn, spec.max_new_tokens)[:1]
            done = {b: got[b] >= targets[b] for b in rows}
            t_last = {b: t_first for b in rows}
            # a static batch: every row of the turn stays in the forward until the last one ends
            while not all(done.values()):
                ctx = float(np.mean([state[b].context + got[b] for b in rows]))
                t_draft = clock.jitter(m.t_draft_ms(method, depth))
                t_verify = clock.jitter(m.t_verify_ms(len(rows), depth, ctx))
                t_accept = clock.jitter(m.accept_ms)
                t_step = t_draft + t_verify + t_accept + clock.jitter(m.overhead_ms)
                clock.tick(t_step)
                for b in rows:
                    if done[b]:
                        continue
                    rng = state[b].rng(m.seed, batch[b].request_id, spec)
                    p_prop = float(m.propose_prob_by_method.get(method, 1.0))
                    drafted = depth if depth and rng.random() < p_prop else 0
                    accepted = 0
                    alpha = m.acceptance(batch[b].category, method)
                    while accepted < drafted and rng.random() < alpha:
                        accepted += 1
                    state[b].steps.append(
                        StepRecord(
                            request_id=batch[b].request_id, step=len(state[b].steps), batch_index=rows.index(b),
                            drafted=drafted, accepted=accepted, emitted=accepted + 1, t_draft=t_draft / 1e3,
                            t_verify=t_verify / 1e3, t_accept=t_accept / 1e3, t_step=t_step / 1e3,
                            verify_tokens=len(rows) * (1 + depth),
                        )
                    )
                    got[b] = min(targets[b], got[b] + accepted + 1)
                    if got[b] >= targets[b]:
                        done[b], t_last[b] = True, clock.t
            for b in rows:
                ids = _output_ids(m.seed, batch[b].request_id, turn, spec.max_new_tokens)[: got[b]]
                state[b].output += ids[1:]
                state[b].context += got[b]
                state[b].decode_time += t_last[b] - t_first
                state[b].decode_tokens += got[b] - 1
                state[b].e2e += t_last[b] - t_start
        recs = [s.record(r, spec.role) for r, s in zip(batch, state)]
        return recs, [st for s in state for st in s.steps]


class _RowState:
    def __init__(self) -> None:
        self.context = 0
        self.context_fed = 0
        self.prompt_tokens = 0
        self.output: list[int] = []
        self.steps: list[StepRecord] = []
        self.ttft = math.nan
        self.decode_time = 0.0
        self.decode_tokens = 0
        self.e2e = 0.0
        self._rng = None

    def rng(self, seed: int, request_id: str, spec: GenerateSpec) -> np.random.Generator:
        if self._rng is None:
            d = spec.drafter
            self._rng = np.random.default_rng(_seed(seed, request_id, d.name, d.method, d.num_speculative_tokens, spec.role))
        return self._rng

    def record(self, req: Request, role: str) -> RequestRecord:
        drafting = [s for s in self.steps if s.drafted > 0]
        hist: list[int] = []
        for s in drafting:
            while len(hist) <= s.accepted:
                hist.append(0)
            hist[s.accepted] += 1
        ms = 1e3
        return RequestRecord(
            request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
            entropy_tier=req.entropy_tier, role=role, prompt_tokens=self.prompt_tokens, n_tokens=len(self.output),
            output_ids=tuple(self.output), ttft=self.ttft / ms,
            tpot=self.decode_time / ms / self.decode_tokens if self.decode_tokens > 0 else math.nan,
            e2e=self.e2e / ms, n_steps=len(self.steps), n_drafts=len(drafting),
            drafted=sum(s.drafted for s in drafting), accepted=sum(s.accepted for s in drafting),
            accepted_hist=tuple(hist), al_source="steps",
        )


class _SimClock:
    """Simulated time in milliseconds; ``jitter`` applies the seeded relative noise."""

    def __init__(self, noise: float, seed: int) -> None:
        self.t = 0.0
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def tick(self, ms: float) -> None:
        self.t += ms

    def jitter(self, ms: float) -> float:
        if self.noise <= 0 or ms == 0:
            return ms
        return ms * float(np.exp(self.rng.normal(0.0, self.noise)))
