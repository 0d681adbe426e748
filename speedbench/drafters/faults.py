"""Fault injection for testing the regression gate: a drafter made slower on purpose.

``faults.delay_ms=N`` (torch backend) wraps the configured drafter so that every draft phase
takes N milliseconds longer, inside the timed draft phase: the thread computes (spins on the
clock) for N ms, as a slower drafter would; a sleep would overshoot by the OS's wake-up
latency (~0.1 ms here, a sixth of the delay a 10% loss needs) and leave the CPU idle.
Acceptance and output are unchanged; only time moves, which is what a drafter slowed by an
engine upgrade looks like.
``faults`` is a key of its own, outside the drafter, so it is not part of any cell's identity:
a slowed run is compared with the same cell of an unslowed one (the resolved config in
``provenance.json`` still records it). Never set it in a benchmark.
"""
from __future__ import annotations

import time

from ..engine.speculative import Proposal
from ..engine.drafting import Drafter


def spin(seconds: float) -> None:
    """Busy for ``seconds`` of wall time (precise to microseconds, unlike ``time.sleep``)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class DelayedDrafter(Drafter):
    def __init__(self, inner: Drafter, delay_ms: float) -> None:
        if delay_ms < 0:
            raise ValueError(f"faults.delay_ms must be >= 0, got {delay_ms}")
        self.inner = inner
        self.delay_s = delay_ms / 1e3
        self.method = inner.method
        self.feature_layers = inner.feature_layers

    def reset(self, history, max_len: int) -> None:
        self.inner.reset(history, max_len)

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        spin(self.delay_s)
        return self.inner.propose(history, num_tokens, params, generator)

    def observe(self, features, start) -> None:
        self.inner.observe(features, start)

    def accepted(self, n_accepted, history) -> None:
        self.inner.accepted(n_accepted, history)


def with_faults(drafter: Drafter, faults) -> Drafter:
    """``drafter`` wrapped according to ``faults`` (a ``config.FaultConfig``)."""
    return DelayedDrafter(drafter, float(faults.delay_ms)) if faults.delay_ms else drafter
