"""Losslessness columns (``metrics.agreement`` fills them)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class AgreementColumns:
    greedy_match_rate: float = NAN  # fraction of requests whose output equals the baseline's; NaN if sampling
    token_match_rate: float = NAN  # matched leading tokens / tokens, over requests; NaN if sampling
    first_divergence: int = -1  # smallest first-divergence position over requests; -1 if none (or sampling)
