"""Degenerate output (``degenerate_output``): a turn whose reply ends in a repetition loop (a
block of <= ``loop_max_period`` tokens repeated back to back >= ``loop_min_repeats`` times,
covering >= ``loop_min_tokens`` tokens and >= ``loop_min_frac`` of the reply); a loop repeats
what the drafter has already seen, so its AL says nothing about real text.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import AcceptanceConfig
from ..records import STATUS_OK, RequestRecord
from ..columns import DegenerateColumns

NAN = math.nan


_DEFAULTS = AcceptanceConfig()  # the rule's defaults are the config's (``acceptance.loop_*``), stated there once


@dataclass(frozen=True)
class LoopRule:
    """The degenerate-output rule (``acceptance.*`` in the config)."""

    max_period: int = _DEFAULTS.loop_max_period
    min_repeats: int = _DEFAULTS.loop_min_repeats
    min_tokens: int = _DEFAULTS.loop_min_tokens
    min_frac: float = _DEFAULTS.loop_min_frac

    @staticmethod
    def from_config(cfg) -> "LoopRule":
        if cfg is None:
            return LoopRule()
        return LoopRule(cfg.loop_max_period, cfg.loop_min_repeats, cfg.loop_min_tokens, cfg.loop_min_frac)


def repetition_tail(ids: Sequence[int], max_period: int) -> list[tuple[int, int]]:
    """For each period p <= max_period: (p, length of the longest suffix with ids[i] == ids[i - p])."""
    a = np.asarray(ids, dtype=np.int64)
    n = len(a)
    out = []
    for p in range(1, min(max_period, n - 1) + 1):
        same = a[p:] == a[:-p]
        misses = np.flatnonzero(~same)
        run = len(same) if misses.size == 0 else len(same) - 1 - int(misses[-1])
        out.append((p, run + p))
    return out


def degenerate_output(ids: Sequence[int], rule: LoopRule = LoopRule()) -> bool:
    """True when ``ids`` (one turn's reply) ends in a repetition loop under ``rule``."""
    n = len(ids)
    if n < rule.min_tokens:
        return False
    for p, length in repetition_tail(ids, rule.max_period):
        if length >= max(rule.min_tokens, rule.min_repeats * p, rule.min_frac * n):
            return True
    return False


def _turn_outputs(r: RequestRecord) -> list[tuple[int, ...]]:
    if r.turn_tokens and sum(r.turn_tokens) == len(r.output_ids):
        out, start = [], 0
        for n in r.turn_tokens:
            out.append(r.output_ids[start : start + n])
            start += n
        return out
    return [r.output_ids]


def degenerate_frac(records: Iterable[RequestRecord], rule: LoopRule = LoopRule()) -> float:
    """Share of requests with a degenerate turn (in any repeat)."""
    per: dict[str, bool] = {}
    for r in (r for r in records if r.status == STATUS_OK):
        bad = any(degenerate_output(t, rule) for t in _turn_outputs(r))
        per[r.request_id] = per.get(r.request_id, False) or bad
    return sum(per.values()) / len(per) if per else NAN


def degenerate_columns(records: Iterable[RequestRecord], cfg=None) -> DegenerateColumns:
    """The degenerate-output columns of a cell (``cfg``: ``config.AcceptanceConfig``; None: its defaults)."""
    cfg = cfg if cfg is not None else _DEFAULTS
    frac = degenerate_frac(records, LoopRule.from_config(cfg))
    return DegenerateColumns(degenerate_frac=frac, degenerate=bool(frac > float(cfg.degenerate_max_frac)))
