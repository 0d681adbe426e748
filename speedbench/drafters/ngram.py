"""Prompt lookup (n-gram) drafting: copy what followed an earlier occurrence of the recent n-gram.

For n from ``prompt_lookup_max`` down to ``prompt_lookup_min``, find the earliest earlier
occurrence of the row's last n tokens in its own context (prompt + generated) and propose
the up to D tokens that followed it. No match -> no proposal for that row this step (such
steps are not counted as drafts, as in vLLM). Proposals are deterministic (p is one-hot).
"""
from __future__ import annotations

import torch

from ..engine.speculative import Proposal
from ..engine.drafting import Drafter


def lookup(context: torch.Tensor, n_min: int, n_max: int, num_tokens: int) -> torch.Tensor:
    """The proposal for one row (possibly empty)."""
    length = context.shape[0]
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        suffix = context[length - n :]
        windows = context[: length - 1].unfold(0, n, 1)  # every earlier n-gram start
        hits = (windows == suffix).all(1).nonzero().flatten()
        for start in hits.tolist():
            follow = context[start + n : start + n + num_tokens]
            if follow.numel() > 0:
                return follow
    return context[:0]


class NgramDrafter(Drafter):

    def __init__(self, ctx, prompt_lookup_min: int = 1, prompt_lookup_max: int = 4, **_options) -> None:
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError(
                f"drafter.prompt_lookup_min/max must satisfy 1 <= min <= max, got {prompt_lookup_min}/{prompt_lookup_max}"
            )
        self.n_min, self.n_max = prompt_lookup_min, prompt_lookup_max
        self.device = ctx.device

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        tokens = torch.zeros(batch, num_tokens, dtype=torch.long, device=self.device)
        counts = torch.zeros(batch, dtype=torch.long, device=self.device)
        if num_tokens == 0:  # a K=0 step of a schedule is a plain decode step: no lookup (it cost 10% of a step)
            return Proposal(tokens=tokens, n_proposed=counts)
        for b in range(batch):
            found = lookup(history.row(b), self.n_min, self.n_max, num_tokens)
            tokens[b, : found.numel()] = found
            counts[b] = found.numel()
        width = int(counts.max()) if batch else 0
        return Proposal(tokens=tokens[:, :width], n_proposed=counts)
