"""A server's streamed chunks matched to its per-request engine steps (vLLM's detailed
per-request spec-decode metrics: accepted and drafted per verify step).

The stream of a turn is the prefill's token, then each engine step's tokens (accepted + 1;
the last step may be cut by a stop token or ``max_tokens``). vLLM lists only steps that had a
proposal: a step without one (e.g. the first decode step of a lookup drafter) emits one token
and is in no list. A client that reads slower than the engine sees two or more steps in one
chunk. :func:`match` walks the chunks in order: a listed step is taken when it fits the rest
of the chunk (on the last chunk it may be cut), otherwise one token is an unlisted step. A chunk
is *merged* when it carries more than one unit (for the first chunk: the prefill's token and
at least one step). Counts that cannot be matched give None.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamMatch:
    units_per_chunk: list[int]  # units in each chunk (the prefill's token counts as one)
    order: list[int]  # the steps in stream order: listed step index, or -1 for an unlisted step
    chunk_of: list[int]  # the chunk each of ``order`` arrived in
    kept: list[int]  # tokens each listed step kept in the output

    @property
    def merged(self) -> int:
        return sum(n > 1 for n in self.units_per_chunk)

    def alone(self, unit: int) -> bool:
        """The unit ``unit`` of ``order`` arrived alone in a chunk after the first (its gap is its step time)."""
        c = self.chunk_of[unit]
        return c > 0 and self.units_per_chunk[c] == 1


def match(chunk_tokens: list[int], step_emitted: list[int], lead: int = 1, unlisted: bool = True) -> StreamMatch | None:
    """Chunks (tokens each) against ``lead`` prefill tokens and the listed steps' emitted tokens;
    ``unlisted=False``: every step is listed (no 1-token steps may be assumed)."""
    kept = [0] * len(step_emitted)
    per_chunk: list[int] = []
    order: list[int] = []
    chunk_of: list[int] = []
    i, pending = 0, lead
    for j, c in enumerate(chunk_tokens):
        last = j == len(chunk_tokens) - 1
        left, n = c, 0
        if pending:
            if c < pending:
                return None
            left, n, pending = left - pending, 1, 0
        while left > 0:
            if i < len(step_emitted) and step_emitted[i] > 0 and (step_emitted[i] <= left or last):
                take = min(step_emitted[i], left)
                kept[i] = take
                order.append(i)
                i += 1
                left -= take
            elif unlisted:  # a step without a proposal: one token
                order.append(-1)
                left -= 1
            else:
                return None
            chunk_of.append(j)
            n += 1
        per_chunk.append(n)
    if pending or any(e > 0 for e in step_emitted[i:]):
        return None  # listed steps that are not in the stream
    return StreamMatch(per_chunk, order, chunk_of, kept)


def merged_chunks(records, steps) -> tuple[int, int] | None:
    """(merged chunks, chunks) over the requests whose steps came from the server's per-step lists
    (``al_source=steps``; their step rows already hold the steps without a proposal), each turn's
    chunks matched to its step rows; None when any turn cannot be matched or there is none."""
    rows: dict[tuple[str, int], list[int]] = {}
    for s in steps:
        rows.setdefault((s.request_id, s.turn), []).append(s.emitted)
    merged = total = 0
    for r in records:
        if r.status != "ok" or r.al_source != "steps" or not r.turn_chunks:
            continue
        start = 0
        for t, n in enumerate(r.turn_chunks):
            found = match(list(r.chunks[start : start + n]), rows.get((r.request_id, t), []), lead=1, unlisted=False)
            start += n
            if found is None:
                return None
            merged, total = merged + found.merged, total + n
    return (merged, total) if total else None


def middle_chunks(records) -> list[int]:
    """Tokens per streamed chunk, each turn's first (prefill) and last (possibly cut) chunk trimmed."""
    out: list[int] = []
    for r in records:
        if r.status != "ok":
            continue
        start = 0
        for n in r.turn_chunks:
            out += list(r.chunks[start + 1 : start + n - 1])
            start += n
    return out
