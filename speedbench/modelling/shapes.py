"""Model shapes for the cost model, read from a Hugging Face ``config.json`` (never weights).

Dense and mixture-of-experts decoder LMs. Keys understood (whichever the config uses):
``hidden_size``, ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``head_dim``, ``vocab_size``; MoE: ``num_local_experts`` |
``num_experts`` | ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
``shared_expert_intermediate_size`` | ``n_shared_experts``, ``first_k_dense_replace``.
Multimodal configs are read through their ``text_config``. Attention variants (MLA,
sliding windows) are modelled as plain GQA.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    n_experts: int = 0  # routed experts per MoE layer; 0 = dense
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # always-on shared expert(s), total width
    dense_layers: int = 0  # leading dense layers of an MoE model
    dtype_bytes: int = 2

    @property
    def group(self) -> int:
        """G: query heads per KV head (GQA group size)."""
        return max(1, self.n_heads // max(1, self.n_kv_heads))

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.experts_per_tok > 0

    @property
    def moe_layers(self) -> int:
        return self.n_layers - self.dense_layers if self.is_moe else 0

    def with_layers(self, n: int, dense: bool = False) -> "ModelShape":
        """The same layer shape, ``n`` layers deep (``dense``: drop the experts, e.g. an EAGLE head)."""
        if dense:
            return replace(self, n_layers=n, n_experts=0, experts_per_tok=0, dense_layers=0)
        return replace(self, n_layers=n, dense_layers=min(self.dense_layers, n))

    def weight_bytes(self) -> float:
        attn = self.hidden * (self.n_heads + 2 * self.n_kv_heads) * self.head_dim + self.n_heads * self.head_dim * self.hidden
        dense_mlp = 3 * self.hidden * self.intermediate
        moe_mlp = 3 * self.hidden * (self.n_experts * self.moe_intermediate + self.shared_intermediate)
        per_layer = (self.n_layers - self.moe_layers) * dense_mlp + self.moe_layers * moe_mlp
        return float(self.n_layers * attn + per_layer + 2 * self.vocab * self.hidden) * self.dtype_bytes

    def kv_bytes_per_token(self) -> float:
        return float(2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes)


def from_config(cfg: dict[str, Any], name: str = "model", dtype_bytes: int | None = None) -> ModelShape:
    """A ``ModelShape`` from a config.json dict (dense or MoE)."""
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "torch_dtype"}}
    try:
        hidden, layers, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise ValueError(f"config of {name!r} lacks {exc.args[0]!r}; need hidden_size, num_hidden_layers, num_attention_heads") from None
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
    top_k = int(cfg.get("num_experts_per_tok") or 0) if experts else 0
    moe_inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0) if experts else 0
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if not shared and cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * moe_inter
    if dtype_bytes is None:
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").replace("torch.", "")
        dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    return ModelShape(
        name=name, hidden=hidden, intermediate=int(cfg.get("intermediate_size") or 4 * hidden), n_layers=layers,
        n_heads=heads, n_kv_heads=kv, head_dim=head_dim, vocab=int(cfg.get("vocab_size") or 32000),
        n_experts=experts, experts_per_tok=top_k, moe_intermediate=moe_inter, shared_intermediate=shared,
        dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0, dtype_bytes=dtype_bytes,
    )


# Public config.json values of a few well-known models, for planning without a download.
SHAPE_PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256),
    "llama-3.1-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                          num_key_value_heads=8, vocab_size=128256),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "qwen3-30b-a3b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, vocab_size=151936, num_experts=128,
                          num_experts_per_tok=8, moe_intermediate_size=768),
    "mixtral-8x7b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=32000, num_local_experts=8, num_experts_per_tok=2),
}


def load_config_dict(spec: str, allow_hub: bool = True) -> dict[str, Any]:
    """The config dict for a preset name, ``random:PRESET``, ``builtin:NAME``, a config.json or a model folder;
    else a hub id's config (from the local cache only unless ``allow_hub``)."""
    if spec in SHAPE_PRESETS:
        return dict(SHAPE_PRESETS[spec])
    from ..models import random_config, random_preset

    preset = random_preset(spec)
    if preset is not None:
        return random_config(preset)
    path = spec
    if spec.startswith("builtin:"):
        from ..models import resolve_path

        path = resolve_path(spec)
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return json.loads(p.read_text())
    try:  # a hub id: the config only (reaches the hub when allowed and the machine can)
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(spec, local_files_only=not allow_hub).to_dict()
    except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear message
        raise FileNotFoundError(
            f"cannot read a model config from {spec!r} (not a preset {sorted(SHAPE_PRESETS)}, "
            f"random:/builtin: name, config.json or folder): {exc}"
        ) from None


def load_shape(spec: str, dtype: str | None = None, name: str | None = None, allow_hub: bool = True) -> ModelShape:
    cfg = load_config_dict(spec, allow_hub)
    return from_config(cfg, name or spec, DTYPE_BYTES.get(dtype) if dtype else None)
