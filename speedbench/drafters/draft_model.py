"""Drafting with a model: an external small LM (same tokenizer) or the target's own first layers.

The drafter keeps its own KV cache. Each step it first catches up on the tokens the
target emitted since its last call (one, or two when every draft was accepted), then
drafts D tokens autoregressively. After verification it rolls its cache back to the
accepted prefix, so its cache never holds a rejected token.
"""
from __future__ import annotations

import torch

from ..engine.speculative import Proposal
from ..engine.drafting import Drafter, draft_autoregressive


def load_same_vocab(ctx, model: str | None):
    """The draft model named by ``drafter.model``, refused unless its vocabulary is the target's."""
    if not model:
        raise ValueError("drafter.model must name the draft model (a path, hub id or builtin:NAME)")
    hf = ctx.load_model(model)
    target_vocab = ctx.target_model.config.get_text_config().vocab_size
    if hf.config.vocab_size != target_vocab:
        raise ValueError(
            f"drafter.model {model!r} has vocab_size {hf.config.vocab_size} but the target has {target_vocab}; "
            "a draft model needs the target's tokenizer"
        )
    return hf


class DraftModelDrafter(Drafter):

    def __init__(self, ctx, model: str | None = None, **_options) -> None:
        self.lm = ctx.make_lm(load_same_vocab(ctx, model))

    def reset(self, history, max_len: int) -> None:
        batch = history.tokens.shape[0]
        self.lm.reset(batch, max_len)
        self.lm.feed_ragged([history.row(b) for b in range(batch)])
        self.lm.truncate(history.lens - 1)  # the last prompt token is fed with the first draft

    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        pending = [history.row(b)[int(self.lm.lens[b]) :] for b in range(batch)]
        logits = self.lm.feed_ragged(pending)
        self._history_lens = history.lens.clone()
        self._width = num_tokens
        return draft_autoregressive(logits, lambda tok, _i: self.lm.forward(tok[:, None])[:, -1],
                                    num_tokens, params, generator)

    def accepted(self, n_accepted, history) -> None:
        # cache holds history (at propose time) + drafts 1..D-1; keep the accepted ones,
        # and always leave at least the newest token pending so the next step has logits.
        kept = self._history_lens + n_accepted.clamp(max=max(self._width - 1, 0))
        self.lm.truncate(torch.minimum(kept, history.lens - 1))


class LayerSkipDrafter(DraftModelDrafter):
    """Self-speculative drafting: the target's first ``num_layers`` layers + final norm + LM head."""


    def __init__(self, ctx, num_layers: int = 1, **_options) -> None:
        self.lm = ctx.make_lm(ctx.target_model, num_layers=num_layers)
