"""Parallel drafting (PARD): a draft model proposes all D tokens in one forward.

The layout is vLLM's (``draft_model`` with ``parallel_drafting``): each step the draft is fed
the tokens the target emitted since its last call at their positions (the newest one, at
position p, is the "bonus" slot), then D-1 copies of the mask token (``pard_token`` in the
draft's config.json) at p+1 .. p+D-1, under ordinary causal attention. The logits at p give
draft 1 and those of mask j give draft 1+j. Each draft token is chosen from its own
distribution (argmax, or a sample from p for exact acceptance); no draft waits for another.

After the forward the cache is cut back to the real tokens, so the masks never stay in it:
the next step writes the target's tokens over their positions, as vLLM does.
"""
from __future__ import annotations

import torch

from ..engine.drafting import Drafter, draft_parallel
from ..engine.speculative import Proposal
from .draft_model import load_same_vocab


class PardDrafter(Drafter):

    def __init__(self, ctx, model: str | None = None, **_options) -> None:
        hf = load_same_vocab(ctx, model)
        mask = getattr(hf.config, "pard_token", None)
        if not isinstance(mask, int) or not 0 <= mask < hf.config.vocab_size:
            raise ValueError(f"drafter.model {model!r}: config.json has no valid pard_token (the mask token id "
                             f"that method pard feeds at the drafted positions), got {mask!r}")
        self.mask_id = mask
        self.lm = ctx.make_lm(hf)
        self.device = ctx.device

    def reset(self, history, max_len: int) -> None:
        batch = history.tokens.shape[0]
        self.lm.reset(batch, max_len)
        self.lm.feed_ragged([history.row(b) for b in range(batch)])
        self.lm.truncate(history.lens - 1)  # the last prompt token is the first step's bonus slot

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        if num_tokens < 1:
            return Proposal.empty(batch, self.device)
        pending = [history.row(b)[int(self.lm.lens[b]):] for b in range(batch)]
        n = torch.tensor([len(r) for r in pending], device=self.device)
        width = int(n.max()) + num_tokens - 1
        feed = torch.full((batch, width), self.mask_id, dtype=torch.long, device=self.device)
        for b, r in enumerate(pending):
            feed[b, : len(r)] = r
        logits = self.lm.forward(feed)  # right of each row's masks: more masks, never read
        self.lm.truncate(history.lens)  # keep the real tokens only
        at = (n - 1)[:, None] + torch.arange(num_tokens, device=self.device)
        logits = logits[torch.arange(batch, device=self.device)[:, None], at]  # [B, D, V]
        return draft_parallel(logits, params, generator)
