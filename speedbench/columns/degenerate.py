"""Degenerate-output columns (``metrics.degenerate`` fills them)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class DegenerateColumns:
    degenerate_frac: float = NAN  # share of requests whose output is a repetition loop
    degenerate: bool = False  # degenerate_frac above acceptance.degenerate_max_frac: do not trust the speedup
