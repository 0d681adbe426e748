"""The predicted speedup column (``metrics.prediction`` fills it)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class PredictionColumns:
    speedup_predicted: float = NAN  # the speedup estimator over per-(request, repeat) predictions
