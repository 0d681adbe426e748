"""What a tracker receives for one cell, computed from the results store (no tracker imports).

* ``summary``: every numeric column of the cell row (NaN left out, never logged as 0) and
  the per-position acceptance as ``accepted_per_pos/<k>`` and ``accepted_per_pos_cond/<k>``;
* ``config``: the cell's settings and the run's provenance, secrets redacted;
* tables: per category (from the per-request records) and per draft position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..results.provenance import redact
from .. import metrics
from ..columns import load_label
from ..records import IDENTITY_FIELDS, STATUS_OK

KEY_COLUMNS = IDENTITY_FIELDS  # the cell's identity: W&B config, never a summary metric
POSITION_COLUMNS = ("accepted_per_pos", "accepted_per_pos_cond")
CATEGORY_COLUMNS = ["category", "context_bucket", "n_requests", "al", "tpot_ms_baseline", "tpot_ms_spec", "speedup"]


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Any]]


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def summary(row: dict[str, Any]) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for key, value in row.items():
        if key in POSITION_COLUMNS:
            for k, v in enumerate(value or (), start=1):
                if (num := _number(v)) is not None:
                    out[f"{key}/{k}"] = num
        elif key not in KEY_COLUMNS and (num := _number(value)) is not None:
            out[key] = num
    return out


def config(row: dict[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    cell = {k: row.get(k) for k in KEY_COLUMNS}
    return redact(
        {
            "cell": cell,
            "run": provenance.get("config", {}),
            "engine": provenance.get("engine", {}),
            "git": provenance.get("git", {}),
            "packages": provenance.get("packages", {}),
        }
    )


def run_name(row: dict[str, Any]) -> str:
    return f"{row['drafter']} D={row['num_speculative_tokens']} B={row['batch_size']}{load_label(row)} {row['category']}"


def tags(row: dict[str, Any]) -> list[str]:
    return [str(row[k]) for k in ("target", "drafter", "method") if row.get(k)]


def per_category(requests: pd.DataFrame) -> Table:
    """AL and TPOT per category from per-request records (AL pooled: 1 + accepted / drafts)."""
    if requests.empty:
        return Table(CATEGORY_COLUMNS, [])
    ok = requests[requests["status"] == STATUS_OK]
    rows = []
    for (category, bucket), group in ok.groupby(["category", "context_bucket"], sort=True):
        spec, base = group[group["role"] == "spec"], group[group["role"] == "baseline"]
        al = metrics.al_from_counts(spec["accepted"].sum(), spec["n_drafts"].sum())
        tpot_b, tpot_s = base["tpot"].median() * 1e3, spec["tpot"].median() * 1e3
        speedup = metrics.paired_speedup(metrics.tpot_ratio_table(group)[1], n_resamples=1).point  # the cell table's estimator
        rows.append([category, bucket, int(spec["request_id"].nunique()), float(al), float(tpot_b), float(tpot_s), float(speedup)])
    return Table(CATEGORY_COLUMNS, rows)


def per_position(row: dict[str, Any]) -> Table:
    uncond, cond = list(row.get("accepted_per_pos") or ()), list(row.get("accepted_per_pos_cond") or ())
    rows = [[k + 1, float(u), float(cond[k]) if k < len(cond) else math.nan] for k, u in enumerate(uncond)]
    return Table(["position", "p_accept_first_k", "p_accept_k_given_previous"], rows)
