"""A lean forward for the Llama family (Llama, Mistral without sliding window, Qwen2, Qwen3).

Same weights as the Hugging Face model, a static KV cache whose slot index is the token
position (so rolling a row back is just lowering ``lens[b]``: stale slots sit at later
positions and the causal mask hides them), fused QKV and gate/up projections, and no
per-call Python machinery. At tiny sizes the cost of a decode step is op overhead, not
arithmetic, which is what this path removes (the gpt-fast pattern).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .cached_lm import BEFORE_FINAL_NORM, CachedLM

SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def lean_supported(model: torch.nn.Module) -> str | None:
    """None when the lean path can run this model, else the reason it cannot."""
    cfg = model.config
    mtype = getattr(cfg, "model_type", "")
    if mtype not in SUPPORTED_TYPES:
        return f"model_type {mtype!r} is not one of {SUPPORTED_TYPES}"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return "sliding-window attention is not implemented in the lean path"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} is not silu"
    rope = getattr(model.model, "rotary_emb", None)
    if rope is None or not hasattr(rope, "inv_freq"):
        return "no rotary_emb.inv_freq on the model"
    if getattr(rope, "rope_type", "default") == "dynamic":
        return "dynamic RoPE scaling is not implemented in the lean path"
    return None


@dataclass
class _Layer:
    ln1: torch.Tensor
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    w_o: torch.Tensor
    ln2: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def interleave_rows(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Reorder each head's output features from HF's half-split RoPE layout (x0..x31 | x32..x63)
    to the interleaved layout (x0, x32, x1, x33, ...), so RoPE is one complex multiply.
    q.k is unchanged because q and k are permuted alike."""
    half = head_dim // 2
    order = torch.stack([torch.arange(half), torch.arange(half) + half], 1).flatten()
    return w.view(n_heads, head_dim, *w.shape[1:])[:, order].reshape(w.shape)


def rope_table(inv_freq: torch.Tensor, max_len: int, device, scale: float = 1.0) -> torch.Tensor:
    """RoPE rotations for positions 0 .. max_len-1 as complex numbers [max_len, hd/2] (see ``apply_rope``)."""
    positions = torch.arange(max_len, device=device, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq.to(device))
    return torch.polar(torch.full_like(freqs, scale), freqs)


def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, hd] in interleaved layout times rot [B, T, 1, hd/2] (complex)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * rot).flatten(-2).type_as(x)


class LeanWeights:
    """The tensors of a Llama-family HF model, re-packed once (QKV and gate/up fused)."""

    def __init__(self, model: torch.nn.Module) -> None:
        why = lean_supported(model)
        if why:
            raise ValueError(f"lean engine cannot run this model: {why}")
        cfg = model.config
        inner = model.model
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.vocab_size = cfg.vocab_size
        self.embed = inner.embed_tokens.weight.detach()
        self.norm = inner.norm.weight.detach()
        self.lm_head = model.lm_head.weight.detach()
        self.inv_freq = inner.rotary_emb.inv_freq.detach().float()
        self.rope_scale = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        self.layers: list[_Layer] = []
        with torch.no_grad():
            for layer in inner.layers:
                att, mlp = layer.self_attn, layer.mlp
                q_heads = (self.n_heads, self.head_dim)
                k_heads = (self.n_kv, self.head_dim)
                w_qkv = [interleave_rows(att.q_proj.weight, *q_heads), interleave_rows(att.k_proj.weight, *k_heads),
                         att.v_proj.weight]
                biases = (att.q_proj.bias, att.k_proj.bias, att.v_proj.bias)
                b_qkv = None
                if all(b is not None for b in biases):
                    b_qkv = torch.cat([interleave_rows(biases[0], *q_heads), interleave_rows(biases[1], *k_heads),
                                       biases[2]]).detach()
                qk_norm = hasattr(att, "q_norm")
                self.layers.append(
                    _Layer(
                        ln1=layer.input_layernorm.weight.detach(),
                        w_qkv=torch.cat(w_qkv, 0).detach(),
                        b_qkv=b_qkv,
                        q_norm=interleave_rows(att.q_norm.weight, 1, self.head_dim).detach() if qk_norm else None,
                        k_norm=interleave_rows(att.k_norm.weight, 1, self.head_dim).detach() if qk_norm else None,
                        w_o=att.o_proj.weight.detach(),
                        ln2=layer.post_attention_layernorm.weight.detach(),
                        w_gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0).detach(),
                        w_down=mlp.down_proj.weight.detach(),
                    )
                )
        self.device = self.embed.device
        self.dtype = self.embed.dtype


class LeanLlama(CachedLM):
    """Static-cache forward over the first ``num_layers`` layers of ``weights`` (all by default).

    ``num_layers < total`` gives the self-speculative (layer-skip) drafter: the same
    embedding, first k layers, final norm and LM head, with a cache of its own.
    """

    def __init__(self, weights: LeanWeights, num_layers: int | None = None) -> None:
        self.w = weights
        n = len(weights.layers) if num_layers is None else num_layers
        if not 1 <= n <= len(weights.layers):
            raise ValueError(f"num_layers must be in [1, {len(weights.layers)}], got {n}")
        self.layers = weights.layers[:n]
        self.device = weights.device
        self.vocab_size = weights.vocab_size
        self.lens = torch.zeros(0, dtype=torch.long, device=self.device)
        self._capacity = (0, 0)

    def reset(self, batch_size: int, max_len: int) -> None:
        w = self.w
        if self._capacity[0] < batch_size or self._capacity[1] < max_len:
            shape = (batch_size, w.n_kv, max_len, w.head_dim)
            self.k_cache = [torch.zeros(shape, dtype=w.dtype, device=self.device) for _ in self.layers]
            self.v_cache = [torch.zeros(shape, dtype=w.dtype, device=self.device) for _ in self.layers]
            self.rot = rope_table(w.inv_freq, max_len, self.device, w.rope_scale)
            self.arange = torch.arange(max_len, device=self.device)
            self._capacity = (batch_size, max_len)
        self.lens = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self.max_len = max_len

    def forward(self, tokens: torch.Tensor, logits_at: torch.Tensor | None = None) -> torch.Tensor:
        w = self.w
        batch, width = tokens.shape
        pos = self.lens[:, None] + self.arange[:width]
        span = int(pos.max()) + 1
        if span > self.max_len:
            raise RuntimeError(f"sequence of {span} tokens exceeds the cache of {self.max_len}")
        single = batch == 1  # one row: cache writes are a plain slice, and T=1 needs no mask
        start = int(self.lens[0]) if single else 0
        rows = None if single else torch.arange(batch, device=self.device)[:, None].expand(batch, width)
        rot = self.rot[pos][:, :, None]
        mask = None if single and width == 1 else (self.arange[:span][None, None, :] <= pos[:, :, None])[:, None]
        x = F.embedding(tokens, w.embed)
        q_size, kv_size = w.n_heads * w.head_dim, w.n_kv * w.head_dim
        features = {0: x} if 0 in self.capture else {}
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.ln1, w.eps)
            q, k, v = F.linear(h, layer.w_qkv, layer.b_qkv).split([q_size, kv_size, kv_size], -1)
            q = q.view(batch, width, w.n_heads, w.head_dim)
            k = k.view(batch, width, w.n_kv, w.head_dim)
            if layer.q_norm is not None:
                q, k = rms_norm(q, layer.q_norm, w.eps), rms_norm(k, layer.k_norm, w.eps)
            q, k = apply_rope(q, rot), apply_rope(k, rot)
            v = v.view(batch, width, w.n_kv, w.head_dim)
            kc, vc = self.k_cache[i], self.v_cache[i]
            if single:
                kc[0, :, start : start + width] = k[0].transpose(0, 1)
                vc[0, :, start : start + width] = v[0].transpose(0, 1)
            else:
                kc[rows, :, pos] = k
                vc[rows, :, pos] = v
            q = q.transpose(1, 2)
            att = F.scaled_dot_product_attention(
                q, kc[:batch, :, :span], vc[:batch, :, :span], attn_mask=mask, enable_gqa=w.n_kv != w.n_heads
            )
            x = x + F.linear(att.transpose(1, 2).reshape(batch, width, q_size), layer.w_o)
            gate, up = F.linear(rms_norm(x, layer.ln2, w.eps), layer.w_gate_up).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
            if i + 1 in self.capture:  # after the last layer: the normed state the LM head reads (as HF's)
                features[i + 1] = rms_norm(x, w.norm, w.eps) if i + 1 == len(self.layers) else x
        if BEFORE_FINAL_NORM in self.capture:  # the final norm's input (what vLLM's MiMo body returns)
            features[BEFORE_FINAL_NORM] = x
        if self.capture:
            self.captured = torch.cat([features[i] for i in self.capture], -1)
        self.lens = self.lens + width
        if logits_at is not None:
            x = x[torch.arange(batch, device=self.device), logits_at]
        return F.linear(rms_norm(x, w.norm, w.eps), w.lm_head).float()

    def truncate(self, new_lens: torch.Tensor) -> None:
        self.lens = new_lens.clone()
