"""The decode loop's drafter protocol: what a drafter sees and must do.

A drafter sees the token history of every row (``History``) and proposes up to D tokens per
row. After verification the engine tells it how many were accepted, so drafters with a KV
cache can roll theirs back. The speculative step itself lives in ``engine.decode``; the
implementations live in ``speedbench.drafters`` behind a registry.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from .sampling import SamplingParams, logits_to_probs, sample
from .speculative import Proposal


class History:
    """Prompt + generated tokens per row: ``tokens[b, :lens[b]]``."""

    def __init__(self, batch: int, capacity: int, device: torch.device) -> None:
        self.tokens = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.lens = torch.zeros(batch, dtype=torch.long, device=device)
        self.capacity = capacity

    def row(self, b: int) -> torch.Tensor:
        return self.tokens[b, : int(self.lens[b])]

    def append(self, new: torch.Tensor, counts: torch.Tensor) -> None:
        """Append ``new[b, :counts[b]]`` to each row."""
        width = new.shape[1]
        if width == 0:
            return
        cols = self.lens[:, None] + torch.arange(width, device=new.device)
        keep = torch.arange(width, device=new.device)[None] < counts[:, None]
        if bool((cols[keep] >= self.capacity).any()):
            raise RuntimeError(f"history capacity {self.capacity} exceeded")
        rows = torch.arange(new.shape[0], device=new.device)[:, None].expand_as(cols)
        self.tokens[rows[keep], cols[keep]] = new[keep]
        self.lens = self.lens + counts


@dataclass
class DraftContext:
    """What a drafter is built with: the loaded target and the run's settings."""

    target_model: Any  # the HF model of the target (for drafters built from it)
    make_lm: Any  # callable(hf_model, num_layers=None) -> CachedLM: an ``engine.build.LMBuilder``
    device: torch.device
    load_model: Any  # callable(path: str) -> HF model, for external drafters
    # state a drafter keeps for the engine's lifetime, not a session's (suffix decoding's tree of earlier
    # outputs, as vLLM keeps it per engine): the backend's dict, keyed by the drafter
    engine_state: dict | None = None


class Drafter(ABC):
    """Proposes draft tokens. ``probs`` is filled only when the drafter samples (p for exact sampling)."""

    method: str = "none"  # the registry key, set by drafters.registry.build_drafter
    # Target layers whose hidden states this drafter reads (EAGLE-style); empty: none.
    feature_layers: tuple[int, ...] = ()

    def reset(self, history: History, max_len: int) -> None:  # noqa: B027 - optional hook
        """A new batch begins; ``history`` holds the prompts. Prefill caches here."""

    @abstractmethod
    def propose(self, history: History, num_tokens: int, params: SamplingParams, generator) -> Proposal:
        """Up to ``num_tokens`` tokens per row continuing ``history``."""

    def observe(self, features: torch.Tensor, start: torch.Tensor) -> None:  # noqa: B027
        """Target hidden states [B, T, F] of ``feature_layers`` at positions ``start[b] + t`` (if any)."""

    def accepted(self, n_accepted: torch.Tensor, history: History) -> None:  # noqa: B027
        """After verification: ``history`` already holds the accepted tokens and the target's token."""


def draft_autoregressive(logits: torch.Tensor, step, num_tokens: int, params: SamplingParams,
                         generator) -> Proposal:
    """D tokens per row from a model that drafts one token at a time: ``logits`` [B, V] give
    draft 1, ``step(tokens [B], i)`` returns the logits for draft i + 2. Greedy takes the
    argmax; sampling draws from p and keeps p for the exact acceptance rule."""
    batch, device = logits.shape[0], logits.device
    if num_tokens < 1:
        return Proposal.empty(batch, device)
    tokens, probs = [], []
    for i in range(num_tokens):
        if params.greedy:
            tok = logits.argmax(-1)
        else:
            p = logits_to_probs(logits, params)
            tok = sample(p, generator)
            probs.append(p)
        tokens.append(tok)
        if i < num_tokens - 1:
            logits = step(tok, i)
    return Proposal(
        tokens=torch.stack(tokens, 1),
        n_proposed=torch.full((batch,), num_tokens, dtype=torch.long, device=device),
        probs=torch.stack(probs, 1) if probs else None,
    )
