"""DFlash drafting in the reference engine: one forward of a draft block for all D tokens.

The layout is vLLM's ``dflash`` (see ``engine.dflash_head``): the engine hands the target's
features of every token it feeds to ``observe``; each step the drafter turns the features
that arrived since its last call (positions up to p-1, p the newest token's) into context
keys and values, then runs one block [newest token at p, D mask tokens at p+1 .. p+D] whose
attention spans the context and the whole block; mask j gives draft j. The block's own keys
are never kept: the next step writes the target's context over those positions, as vLLM does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..engine.dflash_head import load_head
from ..engine.drafting import Drafter
from ..engine.sampling import logits_to_probs, sample
from ..engine.speculative import Proposal
from .eagle3 import _local_dir, write_features


class DFlashDrafter(Drafter):

    def __init__(self, ctx, model: str | None = None, **_options) -> None:
        if not model:
            raise ValueError("drafter.model must name the DFlash draft (a folder, hub id or builtin:NAME)")
        self.head = load_head(_local_dir(model), ctx.device)
        spec = self.head.spec
        tcfg = ctx.target_model.config.get_text_config()
        if spec.target_hidden_size != tcfg.hidden_size or spec.vocab_size != tcfg.vocab_size:
            raise ValueError(f"drafter.model {model!r}: target_hidden_size/vocab_size {spec.target_hidden_size}/"
                             f"{spec.vocab_size} != the target's {tcfg.hidden_size}/{tcfg.vocab_size}")
        bad = [i for i in spec.target_layer_ids if not 0 <= i < tcfg.num_hidden_layers]
        if bad or not 0 <= spec.mask_token_id < spec.vocab_size:
            raise ValueError(f"drafter.model {model!r}: dflash_config target_layer_ids {bad} outside the target's "
                             f"0..{tcfg.num_hidden_layers - 1} or mask_token_id {spec.mask_token_id} outside the vocab")
        target = ctx.target_model
        self.embed = target.get_input_embeddings().weight.detach()
        self.lm_head = target.get_output_embeddings().weight.detach()
        self.feature_layers = spec.feature_layers
        self.device = ctx.device

    def reset(self, history, max_len: int) -> None:
        s = self.head.spec
        batch = history.tokens.shape[0]
        self.k_ctx = torch.zeros(batch, max_len, s.num_key_value_heads, s.head_dim, device=self.device)
        self.v_ctx = torch.zeros_like(self.k_ctx)
        self.feats = torch.zeros(batch, max_len, len(s.target_layer_ids) * s.target_hidden_size, device=self.device)
        self.lens = torch.zeros(batch, dtype=torch.long, device=self.device)  # context positions in k_ctx
        self.arange = torch.arange(max_len, device=self.device)
        self.max_len = max_len

    def observe(self, features: torch.Tensor, start: torch.Tensor) -> None:
        write_features(self.feats, features, start, self.arange, self.max_len)

    def _extend_context(self, upto: torch.Tensor) -> None:
        """Context keys/values for positions lens[b] .. upto[b]-1 (the features that arrived)."""
        width = int((upto - self.lens).max())
        if width > 0:
            rows = torch.arange(upto.shape[0], device=self.device)[:, None]
            positions = torch.minimum(self.lens[:, None] + self.arange[:width], (upto - 1)[:, None].clamp(min=0))
            k, v = self.head.context_kv(self.feats[rows, positions], positions)
            self.k_ctx[rows, positions], self.v_ctx[rows, positions] = k, v
        self.lens = upto.clone()

    @torch.no_grad()
    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        if num_tokens < 1:
            return Proposal.empty(batch, self.device)
        s = self.head.spec
        p = history.lens - 1  # the newest token's position; the target's features cover 0 .. p-1
        self._extend_context(p)
        rows = torch.arange(batch, device=self.device)
        width = 1 + num_tokens
        tokens = torch.full((batch, width), s.mask_token_id, dtype=torch.long, device=self.device)
        tokens[:, 0] = history.tokens[rows, p]
        positions = p[:, None] + self.arange[:width]
        span = int(p.max())
        attend = None
        if batch > 1 or s.causal:  # a ragged context, or a causal block
            ctx_ok = (self.arange[:span][None] < p[:, None])[:, None].expand(batch, width, span)
            own = torch.ones(width, width, dtype=torch.bool, device=self.device)
            own = own.tril() if s.causal else own
            attend = torch.cat([ctx_ok, own[None].expand(batch, -1, -1)], -1)[:, None]
        out = self.head.block(F.embedding(tokens, self.embed), positions, self.k_ctx[:, :span],
                              self.v_ctx[:, :span], attend)
        logits = F.linear(out[:, 1:], self.lm_head)  # [B, D, V]: mask j proposes the token at p + j
        probs = None
        if params.greedy:
            drafted = logits.argmax(-1)
        else:
            probs = logits_to_probs(logits, params)
            drafted = sample(probs, generator)
        return Proposal(tokens=drafted, n_proposed=torch.full((batch,), num_tokens, dtype=torch.long,
                                                              device=self.device), probs=probs)

    def accepted(self, n_accepted, history) -> None:
        """Nothing to roll back: the context stops before the block, which is never kept."""
