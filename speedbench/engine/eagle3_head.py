"""An EAGLE-3 draft head, in the checkpoint layout vLLM's ``eagle3`` method loads.

The head reads three of the target's hidden states (the residual stream after the layers
named in ``eagle_aux_hidden_state_layer_ids``), projects their concatenation with ``fc`` to
one hidden vector, and runs one decoder layer whose attention input is the normalised
token embedding concatenated with the normalised hidden vector (2 * hidden wide):

    e = input_layernorm(embed(token));  r = hidden;  h = hidden_norm(hidden)
    r = r + o_proj(attn([e, h]));  r = r + mlp(post_attention_layernorm(r))
    logits = lm_head(norm(r));  r (pre-norm) is the next draft step's ``hidden``

The first draft step of a position p takes (token x[p+1], fc(target features at p)) and
predicts x[p+2]; each further step takes (its own drafted token, the previous step's r) at
the next position. Embedding and LM head are the target's (vLLM shares them when the
checkpoint has none), so the checkpoint holds only ``fc``, ``midlayer.*`` and ``norm``.

Parameter names match the checkpoint keys, so ``state_dict()`` is the file's content.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .head_files import save_folder

ARCHITECTURE = "LlamaForCausalLMEagle3"

# attend(q [B, T, H, hd], k [B, T, KV, hd], v [B, T, KV, hd]) -> [B, T, H * hd], RoPE applied
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Eagle3Spec:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    target_hidden_size: int
    aux_layers: tuple[int, ...]
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    draft_vocab_size: int | None = None  # < vocab_size: own lm_head + d2t (target id = draft id + d2t)
    norm_before_residual: bool = False  # the residual starts from hidden_norm(hidden), not hidden
    norm_output: bool = False  # the next step's hidden is the normed output, not the pre-norm one

    @classmethod
    def from_config(cls, cfg: dict, target_layers: int | None = None) -> Eagle3Spec:
        """Read a head's config.json (the fields vLLM reads, with its defaults). Without aux layer
        ids, vLLM's default for a target of ``target_layers`` layers is used: (2, L // 2, L - 3)."""
        eagle = cfg.get("eagle_config") or {}
        layers = cfg.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
        if not layers:
            if target_layers is None:
                raise ValueError("EAGLE-3 config names no eagle_aux_hidden_state_layer_ids (eagle_config)")
            layers = (2, target_layers // 2, target_layers - 3)
        unsupported = [k for k in ("norm_before_fc", "fc_norm") if cfg.get(k) or eagle.get(k)]
        if eagle.get("use_aux_hidden_state") is False:
            unsupported.append("use_aux_hidden_state=false")
        if cfg.get("num_hidden_layers", 1) != 1:
            unsupported.append(f"num_hidden_layers={cfg['num_hidden_layers']}")
        if unsupported:
            raise ValueError(f"EAGLE-3 config options not supported by the reference engine: {unsupported} "
                             "(run this head with backend=vllm)")
        rope = cfg.get("rope_parameters") or {}
        hidden = cfg["hidden_size"]
        heads = cfg["num_attention_heads"]
        return cls(
            hidden_size=hidden, intermediate_size=cfg["intermediate_size"], num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            target_hidden_size=cfg.get("target_hidden_size") or hidden, aux_layers=tuple(layers),
            vocab_size=cfg["vocab_size"], rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            draft_vocab_size=cfg.get("draft_vocab_size") or cfg["vocab_size"],
            norm_before_residual=bool(cfg.get("norm_before_residual", False)),
            norm_output=bool(cfg.get("norm_output", False)),
        )

    @property
    def reduced_vocab(self) -> bool:
        return self.draft_vocab_size is not None and self.draft_vocab_size != self.vocab_size

    def to_config(self, **extra) -> dict:
        """config.json for vLLM (``LlamaForCausalLMEagle3``) and for ``from_config``."""
        cfg = {
            "architectures": [ARCHITECTURE], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "num_hidden_layers": 1, "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size or self.vocab_size, "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps, "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False, "dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.aux_layers), "use_aux_hidden_state": True},
        }
        if self.norm_before_residual:
            cfg["norm_before_residual"] = True
        if self.norm_output:
            cfg["norm_output"] = True
        cfg.update(extra)
        return cfg


class _Attention(nn.Module):
    def __init__(self, s: Eagle3Spec) -> None:
        super().__init__()
        width = 2 * s.hidden_size
        self.q_proj = nn.Linear(width, s.num_attention_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(width, s.num_key_value_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(width, s.num_key_value_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)


class _Mlp(nn.Module):
    def __init__(self, s: Eagle3Spec) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, s: Eagle3Spec) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.self_attn = _Attention(s)
        self.post_attention_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.mlp = _Mlp(s)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE in the half-split layout of HF and vLLM Llama; x [B, T, H, hd], cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, :, None] + rotated * sin[:, :, None]


class Eagle3Head(nn.Module):
    def __init__(self, spec: Eagle3Spec) -> None:
        super().__init__()
        self.spec = spec
        self.fc = nn.Linear(len(spec.aux_layers) * spec.target_hidden_size, spec.hidden_size, bias=False)
        self.midlayer = _MidLayer(spec)
        self.norm = nn.RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        inv = 1.0 / spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos(), emb.sin()

    def step(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
             attend: Attend) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step for [B, T] positions; returns (normed output for the LM head, the next
        step's hidden: pre-norm r, or the normed output for ``norm_output`` heads)."""
        s, layer = self.spec, self.midlayer
        batch, width = positions.shape
        normed = layer.hidden_norm(hidden)
        x = torch.cat([layer.input_layernorm(embeds), normed], -1)
        att = layer.self_attn
        cos, sin = self.rope(positions)
        q = rotate(att.q_proj(x).view(batch, width, s.num_attention_heads, s.head_dim), cos, sin)
        k = rotate(att.k_proj(x).view(batch, width, s.num_key_value_heads, s.head_dim), cos, sin)
        v = att.v_proj(x).view(batch, width, s.num_key_value_heads, s.head_dim)
        r = (normed if s.norm_before_residual else hidden) + att.o_proj(attend(q, k, v))
        r = r + layer.mlp(layer.post_attention_layernorm(r))
        out = self.norm(r)
        return out, (out if s.norm_output else r)


def save_head(head: Eagle3Head, out: Path, dtype: torch.dtype = torch.float16, **config_extra) -> None:
    save_folder(head, head.spec.to_config(**config_extra), out, dtype)


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if files:
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        return state
    if (path / "pytorch_model.bin").is_file():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"EAGLE-3 head {path}: no *.safetensors or pytorch_model.bin")


def load_head(path: Path, device: torch.device | str = "cpu", target_layers: int | None = None) -> Eagle3Head:
    """A head from a folder with config.json + weights (fp32 compute). ``own_embed``,
    ``own_lm_head`` and ``d2t`` are set when the checkpoint carries them, else None."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"EAGLE-3 head {path}: no config.json")
    try:
        spec = Eagle3Spec.from_config(json.loads(cfg_file.read_text()), target_layers)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"EAGLE-3 head {cfg_file}: {exc}") from exc
    head = Eagle3Head(spec)
    state = _load_tensors(path)
    extra = sorted(set(state) - set(head.state_dict()))
    unsupported = [k for k in extra if not k.startswith(("embed_tokens", "lm_head", "t2d", "d2t"))]
    if unsupported:
        raise ValueError(f"EAGLE-3 head {path}: unexpected tensors {unsupported[:5]}")
    missing = head.load_state_dict({k: v.float() for k, v in state.items() if k in head.state_dict()}, strict=False)
    if missing.missing_keys:
        raise ValueError(f"EAGLE-3 head {path}: missing tensors {missing.missing_keys[:5]}")
    head.own_embed = state.get("embed_tokens.weight")
    head.own_lm_head = state.get("lm_head.weight")
    head.d2t = state.get("d2t")
    if spec.reduced_vocab and (head.own_lm_head is None or head.d2t is None):
        raise ValueError(f"EAGLE-3 head {path}: draft_vocab_size {spec.draft_vocab_size} < vocab_size "
                         f"{spec.vocab_size} needs lm_head.weight and d2t in the checkpoint")
    return head.to(device).eval()
