"""Acceptance and step cost by what each engine step saw: its live batch and its live context.

Every step row carries ``live_batch`` (sequences in its forward; -1 unknown) and ``context_len``
(prompt + output tokens before it). Per bucket, over the speculative pass's rows:

* ``steps``, ``drafts`` (rows that proposed), ``al`` = 1 + accepted / drafts (the cell's convention);
* ``t_draft_ms``, ``t_verify_ms``, ``t_step_ms``: means over the bucket's target iterations
  (one per ``iteration`` id, as the cell's split columns count them; NaN where not timed).

Live batch buckets are the sizes seen; context buckets are powers of two: a step with context c
is in the bucket ``[2^k, 2^(k+1))`` tokens, named by its lower edge. A cell keeps both lists in
``extra.by_live_batch`` and ``extra.by_context``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..records import StepRecord
from .acceptance import al_from_counts
from .timing import iteration_times, stats_ms


def context_bucket(context_len: int) -> int:
    """The lower edge (tokens, a power of two) of the context bucket of a step; -1 unknown."""
    return 1 << (int(context_len).bit_length() - 1) if context_len > 0 else -1


def by_bucket(steps: Sequence[StepRecord], key) -> list[dict]:
    """Rows per bucket (``key(step)`` -> bucket; -1 = unknown, left out), sorted by bucket."""
    groups: dict[int, list[StepRecord]] = {}
    for s in steps:
        b = key(s)
        if b >= 0:
            groups.setdefault(b, []).append(s)
    out = []
    for b in sorted(groups):
        rows = groups[b]
        drafts = [s for s in rows if s.drafted > 0]
        iters = iteration_times(rows)
        out.append({"bucket": b, "steps": len(rows), "drafts": len(drafts),
                    "al": al_from_counts(sum(s.accepted for s in drafts), len(drafts)),
                    "t_draft_ms": stats_ms([s.t_draft for s in iters])[0],
                    "t_verify_ms": stats_ms([s.t_verify for s in iters])[0],
                    "t_step_ms": stats_ms([s.t_step for s in iters])[0]})
    return out


def bucket_notes(spec_steps: Sequence[StepRecord]) -> dict[str, list[dict]]:
    """``extra`` notes of a cell: acceptance and cost by live batch and by context (empty lists: not known)."""
    def clean(rows):
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]

    return {"by_live_batch": clean(by_bucket(spec_steps, lambda s: s.live_batch)),
            "by_context": clean(by_bucket(spec_steps, lambda s: context_bucket(s.context_len)))}
