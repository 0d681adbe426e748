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
    parallel_methods: [dflash]      draft all D tokens in one step of c (default: drafters.registry's parallel kind)
    propose_prob_by_method: {ngram: 0.8}   chance a step has a proposal at all
    accept_ms: 0.05, overhead_ms: 0.02, prefill_ms_per_token: 0.01
    chars_per_token: 4              prompt tokens = characters / chars_per_token
    noise: 0.0                      relative log-normal jitter on every time
    seed: 0
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import Backend, GenerateSpec, Session, StepCounts, TurnInput, TurnResult
from ..config.engine_options import SyntheticOptions
from ..drafters.registry import PARALLEL, methods_where

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
    def from_options(options: SyntheticOptions) -> "SyntheticModel":
        merged = dataclasses.asdict(options)
        parallel = merged["parallel_methods"]
        merged["parallel_methods"] = methods_where(lambda m: m.kind == PARALLEL) if parallel is None else tuple(parallel)
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
    no_lockstep = "simulated times: no machine drift to pair against"

    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        engine = self.engine  # options typed
        self.model = SyntheticModel.from_options(engine.options)

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "synthetic", "device": "synthetic", "model": "seeded cost/acceptance model"}

    def session(self, spec: GenerateSpec) -> Session:
        return _SyntheticSession(self, spec)


class _SyntheticSession(Session):
    """Simulated time runs on across the pass's batches and turns; ``wall_s`` is the simulated total."""

    def __init__(self, backend: SyntheticBackend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        m = self.m = backend.model
        d = spec.drafter
        self.clock = _SimClock(m.noise, _seed(m.seed, spec.role, d.name, d.num_speculative_tokens, spec.repeat))
        self._rngs: dict[str, np.random.Generator] = {}

    @property
    def wall_s(self) -> float:
        return self.clock.t / 1e3

    def _tokens(self, text: str) -> int:
        return max(1, math.ceil(len(text) / self.m.chars_per_token))

    def render(self, history, user) -> int:
        """No tokenizer: the prompt is its length, the conversation so far plus this user turn."""
        return sum(self._tokens(u) + len(r.output_ids) for u, r in history) + self._tokens(user)

    def reply_text(self, result: TurnResult) -> str:
        return ""

    def _rng(self, request_id: str) -> np.random.Generator:
        if request_id not in self._rngs:
            d, role = self.spec.drafter, self.spec.role
            self._rngs[request_id] = np.random.default_rng(_seed(self.m.seed, request_id, d.name, d.method,
                                                                 d.num_speculative_tokens, role))
        return self._rngs[request_id]

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        m, clock, spec = self.m, self.clock, self.spec
        depth, method = spec.drafter.num_speculative_tokens, spec.drafter.method
        n = len(turns)
        t_start = clock.t
        clock.tick(m.prefill_ms_per_token * sum(t.prompt for t in turns))
        t_first = clock.t
        got, t_last = [1] * n, [t_first] * n
        done = [spec.max_new_tokens <= 1] * n
        steps: list[list[StepCounts]] = [[] for _ in turns]
        iteration = 0
        # a static batch: every row stays in the forward until the last one ends
        while not all(done):
            ctx = float(np.mean([t.prompt + g for t, g in zip(turns, got)]))
            t_draft = clock.jitter(m.t_draft_ms(method, depth))
            t_verify = clock.jitter(m.t_verify_ms(n, depth, ctx))
            t_accept = clock.jitter(m.accept_ms)
            t_step = t_draft + t_verify + t_accept + clock.jitter(m.overhead_ms)
            clock.tick(t_step)
            for b, t in enumerate(turns):
                if done[b]:
                    continue
                rng = self._rng(t.request.request_id)
                drafted = depth if depth and rng.random() < float(m.propose_prob_by_method.get(method, 1.0)) else 0
                accepted = 0
                alpha = m.acceptance(t.request.category, method)
                while accepted < drafted and rng.random() < alpha:
                    accepted += 1
                steps[b].append(StepCounts(drafted, accepted, emitted=accepted + 1, t_step=t_step / 1e3,
                                           t_draft=t_draft / 1e3, t_verify=t_verify / 1e3, t_accept=t_accept / 1e3,
                                           verify_tokens=n * (1 + depth), iteration=iteration, live_batch=n))
                got[b] = min(spec.max_new_tokens, got[b] + accepted + 1)
                if got[b] >= spec.max_new_tokens:
                    done[b], t_last[b] = True, clock.t
            iteration += 1
        results = []
        for b, t in enumerate(turns):
            ids = _output_ids(m.seed, t.request.request_id, t.turn, spec.max_new_tokens)[: got[b]]
            fresh = self._tokens(t.request.turns[t.turn]) + (len(t.history[-1][1].output_ids) if t.history else 0)
            results.append(TurnResult(ids, fresh, (t_first - t_start) / 1e3, (t_last[b] - t_first) / 1e3,
                                      (t_last[b] - t_start) / 1e3, steps=steps[b], al_source="steps"))
        return results


def _finish(self, records, steps) -> dict[str, Any]:
    return {"timing_source": "modelled: backend=synthetic (a seeded cost model, not a measurement)"}


_SyntheticSession.finish = _finish


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
