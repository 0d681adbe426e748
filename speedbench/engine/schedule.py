"""A draft-length schedule: K per live batch size, as vLLM's ``num_speculative_tokens_per_batch_size``.

A schedule is a list of inclusive ``(start, end, K)`` ranges: the first starts at 1, ranges do
not overlap and go up in order, ``start <= end`` and ``K >= 0`` (K=0: a plain decode step). Each
step takes the K of the range holding its live batch size (rows still generating; vLLM: the
scheduled requests), clamped to ``num_speculative_tokens``; a batch size past the last range
takes the last range's K.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Range = tuple[int, int, int]


def parse(value: Any, where: str = "drafter.schedule") -> tuple[Range, ...]:
    """``value`` (a list of [start, end, K]) as ranges; ``ValueError`` naming ``where`` and the fault."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return ()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}={value!r}: must be a list of [start, end, K] ranges")
    out: list[Range] = []
    for i, r in enumerate(value):
        if not isinstance(r, (list, tuple)) or len(r) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in r):
            raise ValueError(f"{where}[{i}]={r!r}: must be [start, end, K] (three integers)")
        start, end, k = (int(x) for x in r)
        if start > end:
            raise ValueError(f"{where}[{i}]={list(r)}: start {start} > end {end}")
        if k < 0:
            raise ValueError(f"{where}[{i}]={list(r)}: K={k} must be >= 0")
        if not out and start != 1:
            raise ValueError(f"{where}[0]={list(r)}: the first range must start at 1")
        if out and start != out[-1][1] + 1:
            what = "overlaps" if start <= out[-1][1] else "leaves a gap after"
            raise ValueError(f"{where}[{i}]={list(r)} {what} {list(out[-1])}: ranges must follow each other "
                             "(next start = previous end + 1)")
        out.append((start, end, k))
    return tuple(out)


def k_for(schedule: Sequence[Range], live: int, cap: int) -> int:
    """The K of the range holding ``live`` rows (the last range's past its end), clamped to ``cap``."""
    k = schedule[-1][2]
    for start, end, kk in schedule:
        if start <= live <= end:
            k = kk
            break
    return max(0, min(k, cap))


def max_k(schedule: Sequence[Range], cap: int | None = None) -> int:
    ks = [k if cap is None else min(k, cap) for _, _, k in schedule]
    return max(ks, default=0)
