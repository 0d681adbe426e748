"""Timing conventions: seconds in records, milliseconds in the cell table; TTFT = submission to
first token; TPOT = (t_last - t_first) / (n_tokens - 1) per request; tokens/s per user =
1 / TPOT; speedup = median baseline TPOT / median speculative TPOT of matched runs.

The draft/verify split: per target iteration from the measured pass's steps; an engine that
times in a separate pass (vLLM on CUDA) gives per-part means in ``extra.timed_split``, which
fill the split columns when the measured pass's steps carry none (never guessed); so does
vLLM's counters fallback, whose steps have no per-step acceptance to carry times. The pass
notes say how the split was measured (``extra.timing_source``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..records import STATUS_OK, RequestRecord, StepRecord
from ..columns import TimingColumns

NAN = math.nan


def iteration_times(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """One record per target iteration (by ``iteration`` id): rows of a batch share a forward and its times."""
    seen, out = set(), []
    for s in steps:
        if s.iteration not in seen:
            seen.add(s.iteration)
            out.append(s)
    return out


def tokens_per_step(steps: Sequence[StepRecord]) -> float:
    """Mean tokens the output kept per target iteration per sequence, no-proposal steps included.

    Kept, not emitted: the tokens of a last step cut at a stop token or ``max_new_tokens`` reach
    no one, and TPOT (so the measured speedup) does not count them. A step whose kept count is
    not known counts what it emitted."""
    return float(np.mean([s.kept if s.kept >= 0 else s.emitted for s in steps])) if steps else NAN


def stats_ms(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, median, p90) in milliseconds over the measured values (NaN = not measured); NaN when none."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return NAN, NAN, NAN
    arr = np.asarray(values, dtype=float) * 1e3
    return float(arr.mean()), float(np.median(arr)), float(np.percentile(arr, 90))


def median(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.median(vals)) if vals else NAN


def iqr(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return NAN
    q75, q25 = np.percentile(vals, [75, 25])
    return float(q75 - q25)


def overhead_fraction(steps: Sequence[StepRecord]) -> float:
    """Loop time outside draft/verify/accept as a fraction of total step time."""
    total = sum(s.t_step for s in steps)
    inside = sum(s.t_draft + s.t_verify + s.t_accept for s in steps)
    return (total - inside) / total if total > 0 else NAN


def other_time(steps: Sequence[StepRecord]) -> float:
    """Mean seconds per iteration outside draft, verification and acceptance (NaN where a part is missing)."""
    # an engine that times acceptance inside verification (HF) leaves t_accept NaN
    vals = [s.t_step - s.t_draft - s.t_verify - (0.0 if math.isnan(s.t_accept) else s.t_accept) for s in steps]
    vals = [v for v in vals if not math.isnan(v)]
    return float(np.mean(vals)) if vals else NAN


def span_error(records: Sequence[RequestRecord], steps: Sequence[StepRecord]) -> float:
    """Median over requests of (sum of the request's timed step times) / (its decode span) - 1.

    The decode span is tpot * (n_tokens - 1) (the engine's first -> last token clock); the check
    says how much of the measured time the per-step split accounts for. NaN where a request has
    a step without a time.
    """
    by: dict = {}
    for s in steps:
        by.setdefault((s.request_id, s.repeat), []).append(s.t_step)
    ratios = []
    for r in records:
        ts = by.get((r.request_id, r.repeat))
        span = r.tpot * (r.n_tokens - 1)
        if r.status != STATUS_OK or not ts or any(math.isnan(t) for t in ts) or not span > 0:
            continue
        ratios.append(sum(ts) / span - 1.0)
    return float(np.median(ratios)) if ratios else NAN


def timed_split(base, spec) -> tuple[dict, dict] | None:
    """(speculative, baseline) per-part means in ms (``draft``, ``verify``, ``accept``, ``other``) from a
    separately timed pass, when the measured pass's steps carry no verification time; None otherwise."""
    split = (spec.extra.get("timed_split") or {}).get("split_ms") or {}
    if not split or not math.isnan(stats_ms([s.t_verify for s in iteration_times(spec.steps)])[0]):
        return None
    return split, (base.extra.get("timed_split") or {}).get("split_ms") or {}


def timing_columns(base, spec, n_gpus: int) -> TimingColumns:
    """The timing columns of a cell from its matched baseline and speculative passes (``GenerateOutput``s)."""
    ok_b = [r for r in base.requests if r.status == STATUS_OK]
    ok_s = [r for r in spec.requests if r.status == STATUS_OK]
    it_b, it_s = iteration_times(base.steps), iteration_times(spec.steps)
    draft = stats_ms([s.t_draft for s in it_s])
    ver = stats_ms([s.t_verify for s in it_s])
    tok_b, tok_s = sum(r.n_tokens for r in ok_b), sum(r.n_tokens for r in ok_s)

    def rate(tokens: int, wall: float, gpus: int = 1) -> float:
        return tokens / wall / max(gpus, 1) if wall > 0 else NAN  # per device: a CPU run (n_gpus=0) is one device

    timed = spec.extra.get("timed_split") or {}
    split_error = float(timed.get("span_error", NAN))
    out = TimingColumns(
        t_draft_ms=draft[0], t_draft_ms_p50=draft[1], t_draft_ms_p90=draft[2],
        t_verify_ms=ver[0], t_verify_ms_p50=ver[1], t_verify_ms_p90=ver[2],
        t_verify_ms_baseline=stats_ms([s.t_verify for s in it_b])[0],
        t_accept_ms=stats_ms([s.t_accept for s in it_s])[0],
        t_step_ms_baseline=stats_ms([s.t_step for s in it_b])[0],
        t_step_ms_spec=stats_ms([s.t_step for s in it_s])[0],
        overhead_frac=overhead_fraction(it_s),
        t_other_ms=other_time(it_s) * 1e3,
        ttft_ms_baseline=median([r.ttft for r in ok_b]) * 1e3,
        ttft_ms_spec=median([r.ttft for r in ok_s]) * 1e3,
        tpot_ms_baseline=median([r.tpot for r in ok_b]) * 1e3,
        tpot_ms_spec=median([r.tpot for r in ok_s]) * 1e3,
        tpot_ms_spec_iqr=iqr([r.tpot for r in ok_s]) * 1e3,
        tpot_ms_baseline_iqr=iqr([r.tpot for r in ok_b]) * 1e3,
        tokens_per_s_user_baseline=median([1 / r.tpot for r in ok_b if r.tpot > 0]),
        tokens_per_s_user_spec=median([1 / r.tpot for r in ok_s if r.tpot > 0]),
        tokens_per_s_baseline=rate(tok_b, base.wall_s),
        tokens_per_s_spec=rate(tok_s, spec.wall_s),
        tokens_per_s_per_gpu_baseline=rate(tok_b, base.wall_s, n_gpus),
        tokens_per_s_per_gpu_spec=rate(tok_s, spec.wall_s, n_gpus),
        timing_source=str(spec.extra.get("timing_source") or base.extra.get("timing_source") or ""),
        split_error=split_error if not math.isnan(split_error) else span_error(spec.requests, spec.steps),
    )
    parts = timed_split(base, spec)
    if parts is None:
        return out
    split, base_split = parts
    return replace(out, t_draft_ms=split["draft"], t_verify_ms=split["verify"], t_accept_ms=split["accept"],
                   t_other_ms=split["other"], t_verify_ms_baseline=base_split.get("verify", NAN))
