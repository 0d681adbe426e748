"""The baseline: no drafts, so every step is one plain decode step of the target."""
from __future__ import annotations

from ..engine.speculative import Proposal
from ..engine.drafting import Drafter


class NoDrafter(Drafter):

    def __init__(self, ctx, **_options) -> None:
        self.device = ctx.device

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        return Proposal.empty(history.tokens.shape[0], self.device)
