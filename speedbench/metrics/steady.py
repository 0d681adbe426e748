"""The steady window of a load point (``load.steady_state``; docs/load.md, "The steady state").

A load point's pass starts with a ramp (in flight climbs to its level) and ends with a drain (the
last requests finish with fewer and fewer beside them); both run at a lower load than the point
names. With ``load.steady_state`` a cell counts, per pass and repeat, the steady window only: its
latencies, TPOT speedup, finished requests and goodput from the requests that finished inside it,
its output tokens/s from the tokens delivered inside it (``tokens_in``: a request's decode tokens
spread evenly over its decode, so a request that ends in the drain counts for the part it ran in
the window), over the window's seconds. The window:

* closed loop (``load.concurrency`` = C, every request ready at once): from the first moment at
  least ``ceil(STEADY_FRAC x C)`` requests are in flight to the last moment the count falls below
  it (as ``vllm bench serve`` counts a point's steady state: in flight >= 0.95 x C). The short dips
  between one request's end and the next one's send lie inside the window, the drain after it;
* open loop (a finite ``load.request_rate``): from the first request's end (before it the count
  can only climb: the arrival process is still filling the engine) to the last request's send
  (after it the count can only fall: the drain).

The in-flight count is the client's: a request is in flight from its send (``t_start``) to its
last token (``t_start + e2e``); a failed request or one without send times counts as neither.
A window shorter than ``max(SHORT_S, SHORT_FRAC x the pass's whole window)`` is flagged (``short``);
a pass with no steady window (too few requests to ever reach the level) keeps all its requests,
with the reason recorded, so a cell is never emptied by the option.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..records import STATUS_OK, RequestRecord

STEADY_FRAC = 0.95  # in flight >= this share of C: the steady state of a closed-loop point
SHORT_S = 10.0  # a steady window shorter than this many seconds ...
SHORT_FRAC = 0.1  # ... or than this share of the pass's whole window is flagged


@dataclass(frozen=True)
class SteadySpan:
    """One pass's steady window (seconds from the pass's first send) and what it kept."""

    t0: float
    t1: float
    whole_s: float  # the pass's whole window: first send -> last token
    kept: int  # finished requests inside the window
    finished: int  # finished requests in the pass
    rule: str  # "closed: in flight >= N" | "open: first end -> last send" | why there is none
    found: bool  # False: no steady window; the pass keeps every request

    @property
    def length_s(self) -> float:
        return self.t1 - self.t0 if self.found else math.nan

    @property
    def short(self) -> bool:
        return self.found and self.length_s < max(SHORT_S, SHORT_FRAC * self.whole_s)

    def note(self) -> dict:
        return asdict(self) | {"length_s": self.length_s, "short": self.short}


def _intervals(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    return [(r.t_start, r.t_start + r.e2e) for r in records
            if r.status == STATUS_OK and math.isfinite(r.t_start) and math.isfinite(r.e2e)]


def closed_span(intervals: list[tuple[float, float]], concurrency: int) -> tuple[float, float] | None:
    """(t0, t1): first time >= ceil(STEADY_FRAC x C) in flight, last time the count falls below it."""
    level = max(1, math.ceil(STEADY_FRAC * concurrency - 1e-9))
    # ends before sends at the same instant: a request that ends as the next is sent is not two in flight
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    n, t0, t1 = 0, None, None
    for t, d in events:
        before = n
        n += d
        if before < level <= n and t0 is None:
            t0 = t
        if before >= level > n:
            t1 = t
    return (t0, t1) if t0 is not None and t1 is not None and t1 > t0 else None


def open_span(intervals: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(t0, t1): the first request's end to the last request's send."""
    if not intervals:
        return None
    t0, t1 = min(e for _, e in intervals), max(s for s, _ in intervals)
    return (t0, t1) if t1 > t0 else None


def steady_span(records: Sequence[RequestRecord], concurrency: int | None, request_rate: float) -> SteadySpan:
    """The steady window of one pass and repeat (``records``: that pass's requests of that repeat)."""
    iv = _intervals(records)
    whole = max(e for _, e in iv) - min(s for s, _ in iv) if iv else math.nan
    if math.isfinite(request_rate):
        span, rule = open_span(iv), "open: first end -> last send"
    elif concurrency is not None and concurrency > 0:
        level = max(1, math.ceil(STEADY_FRAC * concurrency - 1e-9))
        span, rule = closed_span(iv, concurrency), f"closed: in flight >= {level}"
    else:
        span, rule = None, "no load point (load.concurrency and load.request_rate unset)"
    if span is None:
        why = rule if not iv else f"{rule}: never reached (too few requests?); every request kept"
        return SteadySpan(math.nan, math.nan, whole, len(iv), len(iv), why if iv else "no send times", False)
    kept = sum(span[0] <= e <= span[1] for _, e in iv)
    return SteadySpan(span[0], span[1], whole, kept, len(iv), rule, True)


def in_span(record: RequestRecord, span: SteadySpan) -> bool:
    """True when the request counts: it finished inside the window (every request when there is none)."""
    if not span.found:
        return True
    end = record.t_start + record.e2e
    return record.status == STATUS_OK and math.isfinite(end) and span.t0 <= end <= span.t1


def steady_pass(output, concurrency: int | None, request_rate: float):
    """(``output`` with only its steady requests, {repeat: SteadySpan}): a ``GenerateOutput`` whose requests
    are cut to each repeat's steady window; failed requests are kept (failures are data)."""
    from dataclasses import replace

    spans = {rep: steady_span([r for r in output.requests if r.repeat == rep], concurrency, request_rate)
             for rep in sorted({r.repeat for r in output.requests})}
    kept = [r for r in output.requests if r.status != STATUS_OK or in_span(r, spans[r.repeat])]
    return replace(output, requests=kept), spans


def tokens_in(record: RequestRecord, t0: float, t1: float) -> float:
    """The request's output tokens delivered inside [t0, t1]: its first token if it came inside, and its other
    ``n - 1`` spread evenly over its decode (first token -> last; TPOT is one number per request)."""
    if record.status != STATUS_OK or not (math.isfinite(record.t_start) and math.isfinite(record.e2e)):
        return 0.0
    first, last = record.t_start + record.ttft, record.t_start + record.e2e
    if not math.isfinite(first):
        first = last
    out = float(t0 <= first <= t1)
    rest = record.n_tokens - 1
    if rest > 0:
        if last > first:
            out += rest * max(0.0, min(last, t1) - max(first, t0)) / (last - first)
        else:
            out += rest * float(t0 <= last <= t1)
    return out


def window_counts(output, spans: dict[int, SteadySpan]) -> dict[int, dict]:
    """{repeat: {"window": seconds, "tokens": output tokens delivered inside it}} of the repeats with a steady
    window, from the pass's uncut ``output``: every request's share of tokens inside the window counts (a
    request that finished in the drain worked in the window too), so neither edge biases the throughput."""
    return {rep: {"window": s.length_s, "tokens": sum(tokens_in(r, s.t0, s.t1) for r in output.requests
                                                       if r.repeat == rep)}
            for rep, s in spans.items() if s.found}


def steady_note(base_spans: dict[int, SteadySpan], spec_spans: dict[int, SteadySpan]) -> dict:
    """The cell's ``extra.steady_window``: each pass's window per repeat, and a warning when one is short."""
    roles = {"baseline": base_spans, "spec": spec_spans}
    short = [f"{role} repeat {rep}: {s.length_s:.1f} s of {s.whole_s:.1f} s" for role, spans in roles.items()
             for rep, s in spans.items() if s.short]
    none = [f"{role} repeat {rep}: {s.rule}" for role, spans in roles.items() for rep, s in spans.items()
            if not s.found]
    warning = ""
    if short:
        warning = (f"steady window shorter than max({SHORT_S:g} s, {SHORT_FRAC:.0%} of the pass): "
                   + "; ".join(short) + " (lengthen the point: load.num_requests or load.duration_s)")
    if none:
        warning = "; ".join(filter(None, [warning, "no steady window, every request counted: " + "; ".join(none)]))
    return {"steady_window": {role: {str(rep): s.note() for rep, s in spans.items()} for role, spans in roles.items()}
            | {"warning": warning}}
