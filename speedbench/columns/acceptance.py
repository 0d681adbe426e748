"""Acceptance columns (``metrics.acceptance`` fills them; every peer's convention: docs/acceptance.md)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class AcceptanceColumns:
    # AL counts the target's bonus/correction token: 1 <= al <= 1 + num_speculative_tokens
    al: float = NAN
    al_request_mean: float = NAN  # mean over requests of each request's AL
    al_emitted: float = NAN  # pooled, only tokens the output kept
    al_speed_bench: float = NAN  # the SPEED-Bench tool's AL (mean over requests of chunk means)
    acceptance_rate: float = NAN
    accepted_per_pos: tuple[float, ...] = ()  # unconditional P(first k+1 drafts accepted)
    accepted_per_pos_cond: tuple[float, ...] = ()  # P(k-th accepted | first k-1 accepted)
    accepted_hist: tuple[int, ...] = ()
    n_accepted: int = -1  # accepted draft tokens as the engine counts them (all repeats)
    n_accepted_kept: int = -1  # of those, the ones the output kept; -1: not known
    al_window: int = 0  # output positions per bin of al_by_position
    al_by_position: tuple[float, ...] = ()  # AL of the drafts whose first token is in bin k (positions k*w..)
    drafts_by_position: tuple[int, ...] = ()  # drafts in each bin
    al_by_turn: tuple[float, ...] = ()  # AL per user turn (0-based)
