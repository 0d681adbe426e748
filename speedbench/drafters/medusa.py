"""Medusa drafting in the reference engine: heads on the target's last hidden state.

The engine keeps the target's final normed hidden state (``feature_layers`` = the target's
layer count) for every token it feeds; the drafter stores them by position. Each step, the
newest token (position L-1) came from the target's logits at L-2, so all D heads read the
hidden state at L-2 and head k drafts the token at L+k, in one pass: no draft waits for
another (as vLLM's ``medusa``, which reads the hidden state of the last accepted token).
"""
from __future__ import annotations

import torch

from ..engine.drafting import Drafter, draft_parallel
from ..engine.medusa_heads import load_heads
from ..engine.speculative import Proposal
from .eagle3 import Eagle3Drafter, _local_dir


class MedusaDrafter(Drafter):

    def __init__(self, ctx, model: str | None = None, **_options) -> None:
        if not model:
            raise ValueError("drafter.model must name the Medusa heads (a folder, hub id or builtin:NAME)")
        self.heads = load_heads(_local_dir(model), ctx.device)
        tcfg = ctx.target_model.config.get_text_config()
        spec = self.heads.spec
        if spec.hidden_size != tcfg.hidden_size:
            raise ValueError(f"drafter.model {model!r}: hidden_size {spec.hidden_size} != the target's {tcfg.hidden_size}")
        if spec.vocab_size != tcfg.vocab_size:
            raise ValueError(f"drafter.model {model!r}: vocab_size {spec.vocab_size} != the target's {tcfg.vocab_size}")
        self.feature_layers = (tcfg.num_hidden_layers,)
        self.device = ctx.device

    def reset(self, history, max_len: int) -> None:
        batch = history.tokens.shape[0]
        self.feats = torch.zeros(batch, max_len, self.heads.spec.hidden_size, device=self.device)
        self.arange = torch.arange(max_len, device=self.device)
        self.max_len = max_len

    observe = Eagle3Drafter.observe  # the same per-position store of the target's (final) hidden states

    @torch.no_grad()
    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        if num_tokens < 1:
            return Proposal.empty(batch, self.device)
        if num_tokens > self.heads.spec.num_heads:
            raise ValueError(f"medusa drafts at most its {self.heads.spec.num_heads} heads' tokens per step, "
                             f"asked for {num_tokens}")
        rows = torch.arange(batch, device=self.device)
        hidden = self.feats[rows, (history.lens - 2).clamp(min=0)]
        return draft_parallel(self.heads(hidden, num_tokens).float(), params, generator)  # logits [B, D, V]
