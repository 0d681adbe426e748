"""A server's streamed chunks matched to its per-request engine steps (vLLM's detailed
per-request spec-decode metrics: accepted and drafted per verify step).

A stream of a turn is the prefill's token, then each engine step's kept tokens (accepted + 1,
fewer in a step a stop token or ``max_tokens`` cut). A client that reads slower than the
engine sees two or more of these in one chunk. With every step listed, the chunks can be
matched to the steps exactly (every unit holds at least one token, so the greedy match is
the only one): a chunk is *merged* when it carries more than one unit (for the first chunk:
the prefill's token and at least one step). Where the counts do not line up (a step without a
proposal is never listed, so its token is nowhere in the lists) the match is None.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamMatch:
    units_per_chunk: list[int]  # units (the prefill's token counts as one) in each chunk
    first_step: list[int]  # index of the first step each chunk carries (-1: the first chunk carries none)

    @property
    def merged(self) -> int:
        return sum(n > 1 for n in self.units_per_chunk)


def match(chunk_tokens: list[int], step_kept: list[int], lead: int = 1) -> StreamMatch | None:
    """Chunks (tokens each) against ``lead`` prefill tokens and the steps' kept tokens, in order."""
    units = ([lead] if lead > 0 else []) + [k for k in step_kept if k > 0]
    is_step = ([False] if lead > 0 else []) + [True] * sum(1 for k in step_kept if k > 0)
    step_ids = [i for i, k in enumerate(step_kept) if k > 0]
    per_chunk, first = [], []
    u = 0
    for c in chunk_tokens:
        if c <= 0:
            return None
        got, n, start = 0, 0, -1
        while got < c and u < len(units):
            if is_step[u] and start < 0:
                start = step_ids[u - (1 if lead > 0 else 0)]
            got += units[u]
            u += 1
            n += 1
        if got != c:
            return None
        per_chunk.append(n)
        first.append(start)
    return StreamMatch(per_chunk, first) if u == len(units) else None
