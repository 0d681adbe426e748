"""A DFlash draft (block-parallel drafting on the target's hidden states), in the checkpoint
layout vLLM's ``dflash`` method loads (``DFlashDraftModel``, read by its ``qwen3_dflash``).

Context: the target's hidden states after the layers ``dflash_config.target_layer_ids`` + 1
(the residual stream, as for EAGLE-3) of every token whose target forward has run, at
positions 0 .. p-1, are concatenated and projected by ``fc``, normalised by ``hidden_norm`` and
projected by the draft layer's own K and V (K then gets ``k_norm`` and RoPE). These context
keys and values never pass through the layer: they are the draft's KV cache.

Block: the newest token (the bonus, at p) and D copies of the mask token
(``dflash_config.mask_token_id``) at p+1 .. p+D, embedded with the target's embedding, run
through the one Qwen3-style decoder layer (per-head q/k RMS norms, RoPE) whose attention sees
the context keys and every key of the block (non-causal unless ``dflash_config.causal``);
the final norm and the target's LM head turn mask j into draft j. One forward for all D.

Embedding and LM head are the target's (vLLM shares them when the checkpoint has none), so
the checkpoint holds only ``fc``, ``hidden_norm``, ``layers.0.*`` and ``norm``. Parameter
names match the checkpoint keys, so ``state_dict()`` is the file's content.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .head_files import read_folder, save_folder

ARCHITECTURE = "DFlashDraftModel"


@dataclass(frozen=True)
class DFlashSpec:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    target_hidden_size: int
    target_layer_ids: tuple[int, ...]  # DFlash numbering: features after target layer i + 1
    vocab_size: int
    mask_token_id: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    causal: bool = False  # block attention causal (dflash_config.causal) or not (DFlash's default)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target layers whose output the draft reads, in the engine's (EAGLE-3) numbering."""
        return tuple(i + 1 for i in self.target_layer_ids)

    @classmethod
    def from_config(cls, cfg: dict) -> DFlashSpec:
        dflash = cfg.get("dflash_config") or {}
        unsupported = [k for k in ("use_swa", "attention_sink_bias") if dflash.get(k)]
        if cfg.get("num_hidden_layers", 1) != 1:
            unsupported.append(f"num_hidden_layers={cfg['num_hidden_layers']} (vLLM's CPU build runs one layer)")
        if dflash.get("use_aux_hidden_state") is False:
            unsupported.append("use_aux_hidden_state=false")
        if unsupported:
            raise ValueError(f"DFlash config options not supported by the reference engine: {unsupported}")
        layers = dflash.get("target_layer_ids")
        if not layers or "mask_token_id" not in dflash:
            raise ValueError("dflash_config needs target_layer_ids and mask_token_id")
        rope = cfg.get("rope_parameters") or {}
        heads = cfg["num_attention_heads"]
        causal = cfg.get("is_causal", dflash.get("causal", False))
        return cls(
            hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            target_hidden_size=cfg.get("target_hidden_size") or cfg["hidden_size"],
            target_layer_ids=tuple(layers), vocab_size=cfg["vocab_size"], mask_token_id=int(dflash["mask_token_id"]),
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048), causal=bool(causal))

    def to_config(self, **extra) -> dict:
        return {
            "architectures": [ARCHITECTURE], "model_type": "qwen3", "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim, "num_hidden_layers": 1,
            "target_hidden_size": self.target_hidden_size, "vocab_size": self.vocab_size, "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_theta": self.rope_theta, "rope_type": "default"},
            "max_position_embeddings": self.max_position_embeddings, "attention_bias": False,
            "tie_word_embeddings": False,
            "dflash_config": {"mask_token_id": self.mask_token_id, "target_layer_ids": list(self.target_layer_ids),
                              "causal": self.causal},
            **extra,
        }


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Neox-style (half-split) RoPE of x [B, T, heads, hd] at positions [B, T]."""
    freqs = positions[..., None].float() * inv_freq  # [B, T, hd/2]
    cos, sin = freqs.cos()[:, :, None], freqs.sin()[:, :, None]
    a, b = x.chunk(2, -1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


class _Attn(nn.Module):
    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)
        self.q_norm = nn.Module()
        self.q_norm.weight = nn.Parameter(torch.ones(s.head_dim))
        self.k_norm = nn.Module()
        self.k_norm.weight = nn.Parameter(torch.ones(s.head_dim))


class _Mlp(nn.Module):
    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)


class _Layer(nn.Module):
    def __init__(self, s: DFlashSpec) -> None:
        super().__init__()
        self.self_attn, self.mlp = _Attn(s), _Mlp(s)
        self.input_layernorm = nn.Module()
        self.input_layernorm.weight = nn.Parameter(torch.ones(s.hidden_size))
        self.post_attention_layernorm = nn.Module()
        self.post_attention_layernorm.weight = nn.Parameter(torch.ones(s.hidden_size))


class DFlashHead(nn.Module):

    def __init__(self, spec: DFlashSpec) -> None:
        super().__init__()
        self.spec = spec
        self.fc = nn.Linear(len(spec.target_layer_ids) * spec.target_hidden_size, spec.hidden_size, bias=False)
        self.hidden_norm = nn.Module()
        self.hidden_norm.weight = nn.Parameter(torch.ones(spec.hidden_size))
        self.layers = nn.ModuleList([_Layer(spec)])
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(spec.hidden_size))
        self.register_buffer("inv_freq", 1.0 / spec.rope_theta ** (
            torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim), persistent=False)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(*x.shape[:-1], n, self.spec.head_dim)

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, T, KV, hd] of target features [B, T, F] at positions [B, T]."""
        s, att = self.spec, self.layers[0].self_attn
        c = rms(self.fc(features), self.hidden_norm.weight, s.rms_norm_eps)
        k = rms(self._heads(att.k_proj(c), s.num_key_value_heads), att.k_norm.weight, s.rms_norm_eps)
        return rope(k, positions, self.inv_freq), self._heads(att.v_proj(c), s.num_key_value_heads)

    def block(self, embeds: torch.Tensor, positions: torch.Tensor, ctx_k: torch.Tensor, ctx_v: torch.Tensor,
              attend: torch.Tensor | None) -> torch.Tensor:
        """The normed outputs [B, Q, H] of block inputs ``embeds`` [B, Q, H] at ``positions`` [B, Q].

        Keys are the context's [B, C, KV, hd] followed by the block's own; ``attend`` [B, 1 or
        heads, Q, C + Q] (True = attend) or None (every key)."""
        s, layer = self.spec, self.layers[0]
        att = layer.self_attn
        h = rms(embeds, layer.input_layernorm.weight, s.rms_norm_eps)
        q = rms(self._heads(att.q_proj(h), s.num_attention_heads), att.q_norm.weight, s.rms_norm_eps)
        k = rms(self._heads(att.k_proj(h), s.num_key_value_heads), att.k_norm.weight, s.rms_norm_eps)
        q, k = rope(q, positions, self.inv_freq), rope(k, positions, self.inv_freq)
        v = self._heads(att.v_proj(h), s.num_key_value_heads)
        keys = torch.cat([ctx_k, k], 1).transpose(1, 2)
        values = torch.cat([ctx_v, v], 1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=attend,
                                             enable_gqa=s.num_attention_heads != s.num_key_value_heads)
        r = embeds + att.o_proj(out.transpose(1, 2).flatten(2))
        m = rms(r, layer.post_attention_layernorm.weight, s.rms_norm_eps)
        r = r + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(m)) * layer.mlp.up_proj(m))
        return rms(r, self.norm.weight, s.rms_norm_eps)


def save_head(head: DFlashHead, out: Path, dtype: torch.dtype = torch.float16, **config_extra) -> None:
    save_folder(head, head.spec.to_config(**config_extra), out, dtype)


def load_head(path: Path, device: torch.device | str = "cpu") -> DFlashHead:
    """A DFlash draft from a folder with config.json + model.safetensors (fp32 compute)."""
    spec, state = read_folder(path, "DFlash draft", DFlashSpec.from_config)
    head = DFlashHead(spec)
    extra = sorted(k for k in set(state) - set(head.state_dict()) if not k.startswith(("embed_tokens", "lm_head")))
    if extra:
        raise ValueError(f"DFlash draft {path}: tensors the reference engine does not run: {extra[:5]}")
    missing = head.load_state_dict({k: v.float() for k, v in state.items() if k in head.state_dict()}, strict=False)
    if missing.missing_keys:
        raise ValueError(f"DFlash draft {path}: missing tensors {missing.missing_keys[:5]}")
    return head.to(device).eval()
