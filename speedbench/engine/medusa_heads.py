"""Medusa heads, in the checkpoint layout vLLM's ``medusa`` method loads.

Each head is a stack of residual blocks on the target's final (normed) hidden state h at the
last position the target has scored, followed by one LM head shared by all heads
(``original_lm_head`` in config.json; vLLM then builds one ``lm_head`` and loads
``lm_head.weight``):

    x = h;  for each block layer W: x = x + silu(W x)      (no bias: ``medusa_fc_bias`` false)
    logits_k = lm_head(x_k)

The target's own logits at h give the next token t+1; head k (0-based) predicts token t+2+k.
All heads run from the same h, in one pass (parallel drafting). Parameter names match the
checkpoint keys (``blocks.{k}.layers.{j}.weight``, ``lm_head.weight``), so ``state_dict()`` is
the file's content.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .head_files import read_folder, save_folder

ARCHITECTURE = "MedusaModel"


@dataclass(frozen=True)
class MedusaSpec:
    hidden_size: int
    vocab_size: int
    num_heads: int
    num_layers: int = 1  # residual blocks per head (vLLM: num_hidden_layers)

    def to_config(self) -> dict:
        return {"architectures": [ARCHITECTURE], "model_type": "medusa", "hidden_size": self.hidden_size,
                "vocab_size": self.vocab_size, "truncated_vocab_size": self.vocab_size,
                "num_heads": self.num_heads, "num_hidden_layers": self.num_layers,
                "original_lm_head": True, "medusa_fc_bias": False}

    @classmethod
    def from_config(cls, cfg: dict) -> MedusaSpec:
        if not cfg.get("original_lm_head", False):
            raise ValueError("only heads with one shared LM head (original_lm_head: true) are supported")
        if cfg.get("medusa_fc_bias", False):
            raise ValueError("medusa_fc_bias: true is not supported (the blocks have no bias)")
        if cfg.get("truncated_vocab_size", cfg["vocab_size"]) != cfg["vocab_size"]:
            raise ValueError("a truncated draft vocabulary (truncated_vocab_size < vocab_size) is not supported")
        return cls(hidden_size=int(cfg["hidden_size"]), vocab_size=int(cfg["vocab_size"]),
                   num_heads=int(cfg["num_heads"]), num_layers=int(cfg.get("num_hidden_layers", 1)))


class _Block(nn.Module):
    def __init__(self, hidden: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(layers))
        for layer in self.layers:  # Medusa's initialisation: each head starts as the identity
            nn.init.zeros_(layer.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + F.silu(layer(x))
        return x


class MedusaHeads(nn.Module):
    def __init__(self, spec: MedusaSpec) -> None:
        super().__init__()
        self.spec = spec
        self.blocks = nn.ModuleList(_Block(spec.hidden_size, spec.num_layers) for _ in range(spec.num_heads))
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)

    def forward(self, hidden: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """Logits [..., heads, V] of the first ``heads`` heads (default all) from hidden [..., H]."""
        outs = [block(hidden) for block in self.blocks[: heads or self.spec.num_heads]]
        return self.lm_head(torch.stack(outs, -2))


def save_heads(heads: MedusaHeads, out: Path, dtype: torch.dtype = torch.float16) -> None:
    save_folder(heads, heads.spec.to_config(), out, dtype)


def load_heads(path: Path, device: torch.device | str = "cpu") -> MedusaHeads:
    """Heads from a folder with config.json + model.safetensors (fp32 compute)."""
    spec, state = read_folder(path, "Medusa heads", MedusaSpec.from_config)
    heads = MedusaHeads(spec)
    if set(state) != set(heads.state_dict()):
        raise ValueError(f"Medusa heads {path}: tensors {sorted(set(state) ^ set(heads.state_dict()))[:5]} "
                         "missing or unexpected")
    heads.load_state_dict({k: v.float() for k, v in state.items()})
    return heads.to(device).eval()
