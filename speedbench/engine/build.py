"""The one place that turns a loaded HF model into the engine's ``CachedLM``.

``impl``: ``lean`` (the static-cache Llama-family forward; an error when the architecture is
not supported), ``hf`` (the HF model's own forward with a cache), ``auto`` (lean where
supported, else hf). ``num_layers`` builds a shallow model from the first layers of the same
weights (self-speculation drafters).
"""
from __future__ import annotations

import copy

import torch

from .cached_lm import CachedLM, HFCachedLM
from .lean_llama import LeanLlama, LeanWeights, lean_supported

IMPLS = ("auto", "lean", "hf")


class LMBuilder:
    """Builds ``CachedLM`` wrappers; lean weights are prepared once per model."""

    def __init__(self, impl: str = "auto") -> None:
        if impl not in IMPLS:
            raise ValueError(f"backend.impl must be one of {', '.join(IMPLS)}, got {impl!r}")
        self.impl = impl
        self._weights: dict[int, LeanWeights] = {}

    def uses_lean(self, hf_model) -> bool:
        reason = lean_supported(hf_model)
        if self.impl == "lean" and reason:
            raise ValueError(f"backend.impl=lean: {reason}")
        return self.impl == "lean" or (self.impl == "auto" and not reason)

    def __call__(self, hf_model, num_layers: int | None = None) -> CachedLM:
        if not self.uses_lean(hf_model):
            return HFCachedLM(hf_model if num_layers is None else first_layers(hf_model, num_layers))
        key = id(hf_model)
        if key not in self._weights:
            self._weights[key] = LeanWeights(hf_model)
        return LeanLlama(self._weights[key], num_layers)


def first_layers(hf_model, num_layers: int):
    """A shallow HF model sharing the target's embedding, first layers, norm and head."""
    inner = hf_model.model
    if not 1 <= num_layers <= len(inner.layers):
        raise ValueError(f"drafter.num_layers must be in [1, {len(inner.layers)}], got {num_layers}")
    shallow = copy.copy(hf_model)
    shallow._modules = dict(hf_model._modules)
    shallow.model = copy.copy(inner)
    shallow.model._modules = dict(inner._modules)
    shallow.model.layers = torch.nn.ModuleList(list(inner.layers)[:num_layers])
    shallow.config = copy.copy(hf_model.config)
    shallow.config.num_hidden_layers = num_layers
    shallow.model.config = shallow.config
    return shallow
