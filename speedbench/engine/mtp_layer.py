"""A MiMo-style multi-token-prediction (MTP) layer, in the checkpoint layout vLLM's ``mimo_mtp`` loads.

The target (a Qwen2 body, ``architectures: [MiMoForCausalLM]``) carries one MTP layer under
``model.mtp_layers.0.*``. For a position p it takes the target's last hidden state h_p (before
the final norm, as vLLM's MiMo body returns it) and the embedding of the next token x[p+1] and predicts x[p+2]:

    e = token_layernorm(embed(x[p+1]))   (the embedding is zeroed at position 0, as vLLM does)
    h = input_proj([hidden_layernorm(h_p), e])
    h = h + attn(input_layernorm(h));  h = h + mlp(post_attention_layernorm(h))
    out = final_layernorm(h);  logits = lm_head(out)   (the target's embedding and head)

Drafting D > 1 tokens reuses the same layer serially: the next step takes the drafted token and
``out`` (the normed output) as its hidden state, one position further on, as vLLM's proposer does.
Parameter names are the checkpoint keys below ``model.mtp_layers.0.``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..drafters.registry import METHODS
from .eagle3_head import Attend, _Mlp, rotate

LAYERS_PREFIX = METHODS["mtp"].weights_prefix  # every MTP layer of the checkpoint (the method table owns it)
PREFIX = LAYERS_PREFIX + "0."
ARCHITECTURE = "MiMoForCausalLM"  # vLLM maps it to mimo_mtp (method mtp)



@dataclass(frozen=True)
class MtpSpec:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @classmethod
    def from_config(cls, cfg) -> MtpSpec:
        """From the target's (HF) config object."""
        heads = cfg.num_attention_heads
        return cls(hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size, num_attention_heads=heads,
                   num_key_value_heads=cfg.num_key_value_heads or heads,
                   head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
                   rms_norm_eps=cfg.rms_norm_eps,
                   rope_theta=float((getattr(cfg, "rope_parameters", None) or {}).get(
                       "rope_theta", getattr(cfg, "rope_theta", 10000.0))))


class _Attention(nn.Module):
    def __init__(self, s: MtpSpec) -> None:
        super().__init__()
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=True)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=True)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=True)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)


class MtpLayer(nn.Module):
    def __init__(self, spec: MtpSpec) -> None:
        super().__init__()
        self.spec = spec
        h, eps = spec.hidden_size, spec.rms_norm_eps
        self.token_layernorm = nn.RMSNorm(h, eps=eps)
        self.hidden_layernorm = nn.RMSNorm(h, eps=eps)
        self.input_proj = nn.Linear(2 * h, h, bias=False)
        self.input_layernorm = nn.RMSNorm(h, eps=eps)
        self.self_attn = _Attention(spec)
        self.post_attention_layernorm = nn.RMSNorm(h, eps=eps)
        self.mlp = _Mlp(spec)
        self.final_layernorm = nn.RMSNorm(h, eps=eps)
        inv = 1.0 / spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def step(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
             attend: Attend) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step for [B, T] positions; returns (normed output for the LM head, the next
        step's hidden), which for MiMo's MTP are the same tensor."""
        s = self.spec
        batch, width = positions.shape
        embeds = torch.where(positions[..., None] == 0, torch.zeros_like(embeds), embeds)
        x = self.input_proj(torch.cat([self.hidden_layernorm(hidden), self.token_layernorm(embeds)], -1))
        h = self.input_layernorm(x)
        att = self.self_attn
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos(), emb.sin()
        q = rotate(att.q_proj(h).view(batch, width, s.num_attention_heads, s.head_dim), cos, sin)
        k = rotate(att.k_proj(h).view(batch, width, s.num_key_value_heads, s.head_dim), cos, sin)
        v = att.v_proj(h).view(batch, width, s.num_key_value_heads, s.head_dim)
        x = x + att.o_proj(attend(q, k, v))
        x = x + self.mlp(self.post_attention_layernorm(x))
        out = self.final_layernorm(x)
        return out, out


def load_mtp_layer(state: dict[str, torch.Tensor], spec: MtpSpec, where: str) -> MtpLayer:
    """The MTP layer from a target checkpoint's tensors (fp32); a one-line error when it has none."""
    layer = MtpLayer(spec)
    own = {k[len(PREFIX):]: v.float() for k, v in state.items() if k.startswith(PREFIX)}
    if not own:
        raise ValueError(f"{where}: the target checkpoint has no {PREFIX}* tensors (no MTP layer)")
    result = layer.load_state_dict(own, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"{where}: MTP layer tensors missing {result.missing_keys[:4]} "
                         f"unexpected {result.unexpected_keys[:4]}")
    return layer.eval()
