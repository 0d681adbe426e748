"""A draft-length schedule: K per live batch size, as vLLM's ``num_speculative_tokens_per_batch_size``.

A schedule is a list of inclusive ``(start, end, K)`` ranges: the first starts at 1, ranges do
not overlap and go up in order, ``start <= end`` and ``K >= 0`` (K=0: a plain decode step). Each
step takes the K of the range holding its live batch size (rows still generating; vLLM: the
scheduled requests), clamped to ``num_speculative_tokens``; a batch size past the last range
takes the last range's K.

A *(batch, context) schedule* (the reference engine only: vLLM's setting takes the batch size alone)
is a list of inclusive ``[ctx_start, ctx_end, ranges]``: live-context ranges in tokens, the first
from 0, following each other, the last open past its end, each holding a batch schedule as above.
A step's live context is the longest sequence among its live rows (prompt + output so far: what
the verify forward attends over); the step takes the K of the batch range of its context range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Range = tuple[int, int, int]


BY_CONTEXT_ONLY = ("a (batch, context) schedule ([ctx_start, ctx_end, [[start, end, K], ...]] entries) runs on "
                   "backend=torch only: vLLM's num_speculative_tokens_per_batch_size takes the batch size alone "
                   "(give it the batch schedule of one context bucket)")
ContextRange = tuple[int, int, tuple[Range, ...]]
OPEN = 1 << 62  # a batch-only schedule's one context range: every context


def is_by_context(value: Any) -> bool:
    """Whether ``value`` is written as a (batch, context) schedule (its entries' third item a list)."""
    return (isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], (list, tuple))
            and len(value[0]) == 3 and isinstance(value[0][2], (list, tuple)))


def parse(value: Any, where: str = "drafter.schedule") -> tuple[Range, ...]:
    """``value`` (a list of [start, end, K]) as ranges; ``ValueError`` naming ``where`` and the fault."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return ()
    if is_by_context(value):
        raise ValueError(f"{where}: {BY_CONTEXT_ONLY}")
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


def parse_plan(value: Any, where: str = "drafter.schedule") -> tuple[ContextRange, ...]:
    """Either form as context ranges (a batch-only schedule: one range over every context); ``()`` none."""
    if not is_by_context(value):
        ranges = parse(value, where)
        return ((0, OPEN, ranges),) if ranges else ()
    out: list[ContextRange] = []
    for i, r in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(r, (list, tuple)) or len(r) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in r[:2]):
            raise ValueError(f"{here}={r!r}: must be [ctx_start, ctx_end, [[start, end, K], ...]]")
        start, end = int(r[0]), int(r[1])
        if start > end:
            raise ValueError(f"{here}: context start {start} > end {end}")
        if (not out and start != 0) or (out and start != out[-1][1] + 1):
            raise ValueError(f"{here}: context ranges must start at 0 and follow each other "
                             "(next start = previous end + 1)")
        out.append((start, end, parse(r[2], f"{here}[2]")))
    return tuple(out)


def as_plan(schedule: Sequence) -> tuple[ContextRange, ...]:
    """Parsed batch ranges or a parsed plan, as a plan."""
    if schedule and isinstance(schedule[0][2], int):
        return ((0, OPEN, tuple(schedule)),)
    return tuple(schedule)


def k_at(plan: Sequence[ContextRange], live: int, context: int, cap: int) -> int:
    """The K for a step of ``live`` rows at live context ``context`` (past the last range: the last's)."""
    ranges = plan[-1][2]
    for start, end, rr in plan:
        if start <= context <= end:
            ranges = rr
            break
    return k_for(ranges, live, cap) if ranges else max(0, cap)
