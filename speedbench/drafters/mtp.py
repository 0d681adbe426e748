"""MTP drafting in the reference engine: the target's own multi-token-prediction layer.

The target (``architectures: [MiMoForCausalLM]``, a Qwen2 body) carries one MTP layer
(``engine.mtp_layer``). The engine keeps the target's last hidden state (the residual stream
after the last layer, before the final norm: vLLM's ``MiMoModel.forward`` returns that and norms
only for the logits) for every token it feeds and hands it to ``observe``. Each step the drafter first feeds the
pairs (target hidden state at p, token p+1) that arrived since its last call, which yields draft
1; drafts 2..D feed the layer its own drafted token and output, serially, as vLLM's ``mimo_mtp``
proposer does. Draft entries past the verified tokens are rebuilt from the target's real hidden
states on the next step.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..engine.cached_lm import BEFORE_FINAL_NORM
from ..engine.drafting import Drafter, draft_autoregressive
from ..engine.mtp_layer import MtpSpec, load_mtp_layer
from ..engine.speculative import Proposal
from .eagle3 import Eagle3Drafter, pending_pairs


class _CachedAttend:
    """Causal attention of the MTP layer over its own KV cache (RoPE already applied)."""

    def __init__(self, batch: int, kv_heads: int, max_len: int, head_dim: int, device) -> None:
        self.k = torch.zeros(batch, kv_heads, max_len, head_dim, device=device)
        self.v = torch.zeros_like(self.k)
        self.arange = torch.arange(max_len, device=device)
        self.positions = None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        positions = self.positions
        batch, width, heads, hd = q.shape
        rows = torch.arange(batch, device=q.device)[:, None].expand_as(positions)
        self.k[rows, :, positions] = k
        self.v[rows, :, positions] = v
        span = int(positions.max()) + 1
        mask = (self.arange[:span][None, None, :] <= positions[:, :, None])[:, None]
        att = F.scaled_dot_product_attention(q.transpose(1, 2), self.k[:batch, :, :span], self.v[:batch, :, :span],
                                             attn_mask=mask, enable_gqa=heads != k.shape[2])
        return att.transpose(1, 2).reshape(batch, width, heads * hd)


def _target_tensors(target) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    folder = Path(getattr(target.config, "_name_or_path", "") or "")
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise ValueError(f"drafter method mtp: the target's folder {str(folder)!r} has no *.safetensors "
                         "to read its MTP layer from")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


class MtpDrafter(Drafter):

    def __init__(self, ctx, **_options) -> None:
        target = ctx.target_model
        tcfg = target.config.get_text_config()
        self.layer = load_mtp_layer(_target_tensors(target), MtpSpec.from_config(tcfg),
                                    f"target {tcfg._name_or_path}").to(ctx.device)
        self.embed = target.get_input_embeddings().weight.detach()
        self.lm_head = target.get_output_embeddings().weight.detach()
        self.feature_layers = (BEFORE_FINAL_NORM,)  # the last hidden state, before the final norm
        self.device = ctx.device

    def reset(self, history, max_len: int) -> None:
        s = self.layer.spec
        batch = history.tokens.shape[0]
        self.attend = _CachedAttend(batch, s.num_key_value_heads, max_len, s.head_dim, self.device)
        self.feats = torch.zeros(batch, max_len, s.hidden_size, device=self.device)
        self.lens = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.arange = torch.arange(max_len, device=self.device)
        self.max_len = max_len

    observe = Eagle3Drafter.observe  # the same per-position store of the target's hidden states

    def _run(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.attend.positions = positions
        out, _ = self.layer.step(F.embedding(tokens, self.embed), hidden, positions, self.attend)
        return out

    @torch.no_grad()
    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        if num_tokens < 1:
            return Proposal.empty(batch, self.device)
        positions, clamped, last_valid, rows = pending_pairs(history, self.lens, self.arange)
        out = self._run(history.tokens[rows[:, None], clamped + 1], self.feats[rows[:, None], clamped], positions)
        self.lens = history.lens - 1
        hidden = out[rows, last_valid][:, None]

        def step(tok, i):  # draft i + 2 sits at position history.lens - 1 + i
            nonlocal hidden
            hidden = self._run(tok[:, None], hidden, (history.lens - 1 + i)[:, None])
            return F.linear(hidden[:, -1], self.lm_head)

        return draft_autoregressive(F.linear(out[rows, last_valid], self.lm_head), step, num_tokens, params,
                                    generator)
