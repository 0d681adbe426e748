"""EAGLE-3 drafting in the reference engine: a head that reads the target's hidden states.

The engine asks the target to keep the residual stream after the head's ``aux_layers`` for
every token it feeds (prefill and verification) and hands them to ``observe``; the drafter
stores them by position. Each step it first feeds the pairs (target features at p, token
p+1) that arrived since its last call, which yields draft 1; drafts 2..D feed the head's own
drafted token and pre-norm output. After verification the entries from drafts 2..D are
dropped: the next step rebuilds those positions from the target's real features, as vLLM does.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..engine.eagle3_head import Eagle3Head, load_head
from ..engine.lean_llama import interleave_rows, rms_norm, apply_rope, rope_table
from ..engine.speculative import Proposal
from ..models import local_dir
from ..engine.drafting import Drafter, draft_autoregressive


def _local_dir(path: str) -> Path:
    """The head's folder: ``builtin:``/local paths as they are, a hub id downloaded (only when named)."""
    local = Path(local_dir(path))
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(path))


class _LeanHead:
    """The head's weights packed for decoding (fused QKV and gate/up, interleaved RoPE), as
    ``engine.lean_llama`` does for the target; numerically the same as ``Eagle3Head.step``."""

    def __init__(self, head: Eagle3Head) -> None:
        s, layer = head.spec, head.midlayer
        att = layer.self_attn
        with torch.no_grad():
            self.w_fc = head.fc.weight.detach()
            self.ln_in, self.ln_hidden = layer.input_layernorm.weight.detach(), layer.hidden_norm.weight.detach()
            self.w_qkv = torch.cat([interleave_rows(att.q_proj.weight, s.num_attention_heads, s.head_dim),
                                    interleave_rows(att.k_proj.weight, s.num_key_value_heads, s.head_dim),
                                    att.v_proj.weight]).detach()
            self.w_o = att.o_proj.weight.detach()
            self.ln_post = layer.post_attention_layernorm.weight.detach()
            self.w_gate_up = torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]).detach()
            self.w_down = layer.mlp.down_proj.weight.detach()
            self.norm = head.norm.weight.detach()
        self.inv_freq = head.inv_freq
        self.eps, self.spec = s.rms_norm_eps, s
        self.split = [s.num_attention_heads * s.head_dim, s.num_key_value_heads * s.head_dim,
                      s.num_key_value_heads * s.head_dim]


def pending_pairs(history, lens: torch.Tensor, arange: torch.Tensor):
    """The (target features at p, token p+1) pairs a hidden-state drafter has not fed yet, p = lens ..
    history.lens - 2: (positions [B, W], the same clamped to each row's last pair, each row's last
    valid column, row ids)."""
    counts = history.lens - 1 - lens
    positions = lens[:, None] + arange[: int(counts.max())]
    last_valid = (counts - 1).clamp(min=0)
    clamped = torch.minimum(positions, (history.lens - 2)[:, None].clamp(min=0))
    return positions, clamped, last_valid, torch.arange(history.tokens.shape[0], device=lens.device)


def write_features(feats: torch.Tensor, features: torch.Tensor, start: torch.Tensor, arange: torch.Tensor,
                   max_len: int) -> None:
    """Target features [B, T, F] into ``feats`` [B, max_len, F] at positions start[b] .. start[b]+T-1
    (rejected ones get overwritten later; positions past max_len are dropped)."""
    batch, width = features.shape[:2]
    cols = start[:, None] + arange[:width]
    rows = torch.arange(batch, device=feats.device)[:, None].expand_as(cols)
    keep = cols < max_len
    feats[rows[keep], cols[keep]] = features[keep].float()


class Eagle3Drafter(Drafter):

    def __init__(self, ctx, model: str | None = None, **_options) -> None:
        if not model:
            raise ValueError("drafter.model must name the EAGLE-3 head (a folder, hub id or builtin:NAME)")
        folder = _local_dir(model)
        tcfg = ctx.target_model.config.get_text_config()
        n_layers = tcfg.num_hidden_layers
        self.head = load_head(folder, ctx.device, target_layers=n_layers)
        spec = self.head.spec
        if spec.target_hidden_size != tcfg.hidden_size:
            raise ValueError(f"drafter.model {model!r}: target_hidden_size {spec.target_hidden_size} != the target's "
                             f"hidden_size {tcfg.hidden_size}")
        if spec.vocab_size != tcfg.vocab_size:
            raise ValueError(f"drafter.model {model!r}: vocab_size {spec.vocab_size} != the target's {tcfg.vocab_size}")
        bad = [i for i in spec.aux_layers if not 0 <= i < n_layers]
        if bad:
            raise ValueError(f"drafter.model {model!r}: aux layers {bad} are outside the target's 0..{n_layers - 1}")
        target = ctx.target_model
        own_embed, own_head = self.head.own_embed, self.head.own_lm_head
        self.embed = (own_embed.float().to(ctx.device) if own_embed is not None
                      else target.get_input_embeddings().weight.detach())
        self.lm_head = (own_head.float().to(ctx.device) if own_head is not None
                        else target.get_output_embeddings().weight.detach())
        # reduced draft vocabulary: draft id i is target id i + d2t[i]
        self.draft_to_target = None
        if spec.reduced_vocab:
            self.draft_to_target = (torch.arange(spec.draft_vocab_size) + self.head.d2t.long()).to(ctx.device)
        self.vocab_size = spec.vocab_size
        self.feature_layers = tuple(spec.aux_layers)
        self.device = ctx.device
        self.lean = _LeanHead(self.head)

    # ------------------------------------------------------------------ state
    def reset(self, history, max_len: int) -> None:
        s = self.head.spec
        batch = history.tokens.shape[0]
        shape = (batch, s.num_key_value_heads, max_len, s.head_dim)
        self.k_cache = torch.zeros(shape, device=self.device)
        self.v_cache = torch.zeros(shape, device=self.device)
        self.feats = torch.zeros(batch, max_len, len(s.aux_layers) * s.target_hidden_size, device=self.device)
        self.lens = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.arange = torch.arange(max_len, device=self.device)
        self.rot = rope_table(self.lean.inv_freq, max_len, self.device)
        self.max_len = max_len

    def observe(self, features: torch.Tensor, start: torch.Tensor) -> None:
        write_features(self.feats, features, start, self.arange, self.max_len)

    # ------------------------------------------------------------------ one head call
    def _run(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        """Feed [B, T] (token, hidden) pairs at ``positions`` through the cached head;
        returns (normed output for the LM head, pre-norm residual), both [B, T, H]."""
        w, s = self.lean, self.lean.spec
        batch, width = positions.shape
        x = torch.cat([rms_norm(F.embedding(tokens, self.embed), w.ln_in, w.eps), rms_norm(hidden, w.ln_hidden, w.eps)], -1)
        q, k, v = F.linear(x, w.w_qkv).split(w.split, -1)
        rot = self.rot[positions][:, :, None]
        q = apply_rope(q.view(batch, width, s.num_attention_heads, s.head_dim), rot)
        k = apply_rope(k.view(batch, width, s.num_key_value_heads, s.head_dim), rot)
        v = v.view(batch, width, s.num_key_value_heads, s.head_dim)
        span = int(positions.max()) + 1
        if batch == 1:  # contiguous positions: a slice write, and one query needs no mask
            start = int(positions[0, 0])
            self.k_cache[0, :, start: start + width] = k[0].transpose(0, 1)
            self.v_cache[0, :, start: start + width] = v[0].transpose(0, 1)
        else:
            rows = torch.arange(batch, device=self.device)[:, None].expand_as(positions)
            self.k_cache[rows, :, positions] = k
            self.v_cache[rows, :, positions] = v
        mask = None if batch == 1 and width == 1 else (self.arange[:span][None, None, :] <= positions[:, :, None])[:, None]
        att = F.scaled_dot_product_attention(q.transpose(1, 2), self.k_cache[:batch, :, :span],
                                             self.v_cache[:batch, :, :span], attn_mask=mask,
                                             enable_gqa=s.num_attention_heads != s.num_key_value_heads)
        residual = x[..., s.hidden_size:] if s.norm_before_residual else hidden
        r = residual + F.linear(att.transpose(1, 2).reshape(batch, width, -1), w.w_o)
        gate, up = F.linear(rms_norm(r, w.ln_post, w.eps), w.w_gate_up).chunk(2, -1)
        r = r + F.linear(F.silu(gate) * up, w.w_down)
        out = rms_norm(r, w.norm, w.eps)
        return out, (out if s.norm_output else r)

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """Target-vocabulary logits [B, V] (-inf outside a reduced draft vocabulary)."""
        logits = F.linear(out, self.lm_head)
        if self.draft_to_target is None:
            return logits
        full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        full[:, self.draft_to_target] = logits
        return full

    @torch.no_grad()
    def propose(self, history, num_tokens, params, generator) -> Proposal:
        batch = history.tokens.shape[0]
        if num_tokens < 1:
            return Proposal.empty(batch, self.device)
        positions, clamped, last_valid, rows = pending_pairs(history, self.lens, self.arange)
        tokens = history.tokens[rows[:, None], clamped + 1]
        hidden = F.linear(self.feats[rows[:, None], clamped], self.lean.w_fc)
        out, resid = self._run(tokens, hidden, positions)
        self.lens = history.lens - 1
        hidden = resid[rows, last_valid][:, None]

        def step(tok, i):  # draft i + 2 sits at position history.lens - 1 + i
            nonlocal hidden
            out_i, hidden = self._run(tok[:, None], hidden, (history.lens - 1 + i)[:, None])
            return self._logits(out_i[:, -1])

        return draft_autoregressive(self._logits(out[rows, last_valid]), step, num_tokens, params, generator)

    def accepted(self, n_accepted, history) -> None:
        """Nothing to roll back: ``lens`` already stops before the drafted entries."""
