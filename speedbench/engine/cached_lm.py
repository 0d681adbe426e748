"""A causal LM with a KV cache that sequences in a batch advance and roll back independently.

The one contract every model wrapper keeps (the engine relies on nothing else):

* ``lens[b]`` is the number of tokens of row ``b`` held in the cache.
* ``forward(tokens[B, T])`` appends T tokens per row at positions ``lens[b] .. lens[b]+T-1``,
  advances ``lens`` by T and returns logits ``[B, T, V]`` (or ``[B, V]`` at ``logits_at``).
* ``truncate(new_lens)`` forgets everything at positions ``>= new_lens[b]``: rejected draft
  tokens, and right-padding of a ragged feed.

Ragged acceptance in a batch is therefore just ``truncate`` with a different length per row.

Feature capture (for EAGLE-style drafters): when ``capture`` names layer ids, each
``forward`` leaves ``captured`` [B, T, len(capture) * hidden]: the residual stream after
that many decoder layers (vLLM's ``eagle_aux_hidden_state_layer_ids`` convention); the id equal to
the number of layers gives the final normed hidden state, the one the LM head reads (HF's last
``hidden_states`` entry; what Medusa heads read).
The id ``BEFORE_FINAL_NORM`` gives the input of the final norm instead (the residual stream after
all layers: what vLLM's MiMo body hands its MTP proposer; the norm is only in its logits).
"""
from __future__ import annotations

import functools
from abc import ABC, abstractmethod

import torch

BEFORE_FINAL_NORM = -1  # capture id: the final norm's input, not a layer count (see the module doc)


class CachedLM(ABC):
    vocab_size: int
    device: torch.device
    lens: torch.Tensor
    capture: tuple[int, ...] = ()
    captured: torch.Tensor | None = None

    @abstractmethod
    def reset(self, batch_size: int, max_len: int) -> None:
        """Empty cache for ``batch_size`` rows of up to ``max_len`` positions."""

    @abstractmethod
    def forward(self, tokens: torch.Tensor, logits_at: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` [B, T]; logits [B, T, V], or [B, V] gathered at index ``logits_at[b]``."""

    @abstractmethod
    def truncate(self, new_lens: torch.Tensor) -> None:
        """Drop cached positions ``>= new_lens[b]`` (``new_lens <= lens``)."""

    def feed_ragged(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """Append a different number (>= 1) of tokens to each row; logits after each row's last token [B, V]."""
        n = torch.tensor([len(r) for r in rows], device=self.device)
        width = int(n.max())
        padded = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
        for b, r in enumerate(rows):
            padded[b, : len(r)] = r
        before = self.lens.clone()
        logits = self.forward(padded, logits_at=n - 1)
        if int(n.min()) != width:
            self.truncate(before + n)
        return logits


class HFCachedLM(CachedLM):
    """Any ``AutoModelForCausalLM`` through its own forward and a ``DynamicCache``.

    Rows cannot shrink a DynamicCache independently, so rolled-back slots become holes:
    they stay in the cache but the 2-D attention mask hides them, and ``position_ids``
    carry each row's true positions. Correct for every HF model that honours an
    attention mask and explicit positions; slower than the lean path.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.get_text_config().vocab_size)
        self.lens = torch.zeros(0, dtype=torch.long, device=self.device)

    def reset(self, batch_size: int, max_len: int) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.slot_pos = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.lens = torch.zeros(batch_size, dtype=torch.long, device=self.device)

    def forward(self, tokens: torch.Tensor, logits_at: torch.Tensor | None = None) -> torch.Tensor:
        batch, width = tokens.shape
        pos = self.lens[:, None] + torch.arange(width, device=self.device)
        self.slot_pos = torch.cat([self.slot_pos, pos], 1)
        self.valid = torch.cat([self.valid, torch.ones_like(pos, dtype=torch.bool)], 1)
        run = functools.partial(forward_before_final_norm, self.model) if BEFORE_FINAL_NORM in self.capture else self._plain
        out, before_norm = run(
            input_ids=tokens,
            attention_mask=self.valid.long(),
            position_ids=pos,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=bool(self.capture),
        )
        self.cache = out.past_key_values
        if self.capture:
            self.captured = torch.cat([before_norm if i == BEFORE_FINAL_NORM else out.hidden_states[i] for i in self.capture], -1)
        self.lens = self.lens + width
        logits = out.logits
        if logits_at is not None:
            logits = logits[torch.arange(batch, device=self.device), logits_at]
        return logits.float()

    def _plain(self, **kwargs):
        return self.model(**kwargs), None

    def truncate(self, new_lens: torch.Tensor) -> None:
        self.valid &= self.slot_pos < new_lens[:, None]
        self.lens = new_lens.clone()


def forward_before_final_norm(model: torch.nn.Module, **kwargs):
    """``model(**kwargs)`` and the input of its decoder's final norm: the residual stream after
    the last layer, before the norm (HF's ``hidden_states[-1]`` is after it)."""
    norm = getattr(model.get_decoder(), "norm", None)
    if not isinstance(norm, torch.nn.Module):
        raise ValueError(f"{type(model).__name__}: no final norm (decoder.norm) to take the last hidden state from")
    seen: list[torch.Tensor] = []
    handle = norm.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    try:
        out = model(**kwargs)
    finally:
        handle.remove()
    return out, seen[-1]
