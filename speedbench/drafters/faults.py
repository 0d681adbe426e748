"""Fault injection for testing the regression gate: a drafter made slower on purpose.

``+drafter.options.delay_ms=N`` (torch backend) wraps the configured drafter so that every
draft phase takes N milliseconds longer, inside the timed draft phase. Acceptance and
output are unchanged; only time moves, which is what a drafter slowed by an engine
upgrade looks like. The option is not part of the cell's identity (see ``cells.py``), so a
slowed run is compared with the same cell of an unslowed one (the resolved config in
``provenance.json`` still records it). Never set it in a benchmark.
"""
from __future__ import annotations

import time

from ..engine.speculative import Proposal
from .base import Drafter

FAULT_OPTIONS = ("delay_ms",)  # drafter.options keys that inject faults (excluded from cell ids)


class DelayedDrafter(Drafter):
    def __init__(self, inner: Drafter, delay_ms: float) -> None:
        if delay_ms < 0:
            raise ValueError(f"drafter.options.delay_ms must be >= 0, got {delay_ms}")
        self.inner = inner
        self.delay_s = delay_ms / 1e3
        self.method = inner.method

    def reset(self, history, max_len: int) -> None:
        self.inner.reset(history, max_len)

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        time.sleep(self.delay_s)
        return self.inner.propose(history, num_tokens, params, generator)

    def accepted(self, n_accepted, history) -> None:
        self.inner.accepted(n_accepted, history)


def with_faults(drafter: Drafter, options: dict) -> Drafter:
    """``drafter`` wrapped according to the fault options in ``drafter.options`` (if any)."""
    delay_ms = options.get("delay_ms")
    return DelayedDrafter(drafter, float(delay_ms)) if delay_ms else drafter
