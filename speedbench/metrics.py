"""Every metric, defined once, with its convention beside it.

Acceptance conventions (as vLLM's counters and SPEED-Bench):
  * a *draft* is a target iteration in which at least one draft token was proposed;
    steps where a lookup drafter found nothing are not drafts (AL is conditional on a proposal);
  * AL = 1 + accepted / drafts  -- the target's own correction/bonus token is INCLUDED,
    so 1 <= AL <= 1 + D. ("Mean accepted tokens" in some tools is AL - 1.);
  * acceptance rate = accepted / drafted tokens (depends on D; AL is the headline);
  * per-position, unconditional: P(first k drafts all accepted) = #drafts with accepted >= k / drafts
    (vLLM's num_accepted_tokens_per_pos[k-1] / num_drafts);
  * per-position, conditional: P(k-th accepted | first k-1 accepted) = uncond[k] / uncond[k-1].
AL on each peer's convention (docs/acceptance.md; the same engine steps, different counting):
  * ``al``: pooled 1 + accepted / drafts over the cell's requests (vLLM's counters); accepted
    drafts count even in a step whose output a stop token or max_new_tokens cut;
  * ``al_request_mean``: the mean over requests of each request's AL (1 + accepted / drafts of
    that request, its repeats pooled): every prompt weighs the same (vLLM #42690's ask);
  * ``al_emitted``: pooled kept / drafts, where kept = the tokens of each drafting step that the
    output kept (accepted + 1 unless a stop token or max_new_tokens cut the step): <= ``al``;
    NaN when any request's engine did not say what was kept (pooled counters or histograms);
  * ``al_speed_bench``: the SPEED-Bench tool's AL (NVIDIA Model-Optimizer
    ``examples/specdec_bench``, metrics ``SpecBench``): per turn, the token count of every
    streamed chunk that carried tokens, the first (prefill) chunk included, the last chunk less
    the stop token when the turn ended on one (dropped if nothing else is left), no drafting
    condition (a step where nothing was proposed is a chunk of 1); a request's AL = the mean of
    its chunk counts over all its turns; the cell's AL = the mean over its requests;
  * ``al_by_position`` / ``al_by_turn``: ``al``'s convention on the drafts whose first token
    falls in each window of ``acceptance.window`` output positions (within the turn's reply) /
    in each user turn.
Degenerate output (``degenerate_output``): a turn whose reply ends in a repetition loop (a
block of <= ``loop_max_period`` tokens repeated back to back >= ``loop_min_repeats`` times,
covering >= ``loop_min_tokens`` tokens and >= ``loop_min_frac`` of the reply); a loop repeats
what the drafter has already seen, so its AL says nothing about real text.
Timing conventions: seconds in records, milliseconds in the cell table; TTFT = submission to
first token; TPOT = (t_last - t_first) / (n_tokens - 1) per request; tokens/s per user =
1 / TPOT; speedup = median baseline TPOT / median speculative TPOT of matched runs.

Speedup estimator (the cell table's ``speedup``; the gate and the report use the same):
  every request is measured in several *repeats*; in each repeat its baseline and speculative
  passes run back to back in alternating order (ABBA), so drift and bursts of load hit both.
  The paired ratio of request i in repeat r is TPOT_base[i, r] / TPOT_spec[i, r];
  s_i = median over repeats of the paired ratios (a burst that hit one pass is outvoted);
  speedup = geometric mean over requests of s_i (each prompt weighs the same; ratios average
  on the log scale). Its interval (``speedup_ci_low/high``) is a two-level percentile bootstrap:
  resample requests, then repeats within each resampled request, so both request-to-request
  and repeat-to-repeat variation are in it. ``speedup_noise``: the relative half-width of the
  same interval with the prompts held fixed (repeats resampled only): the measurement's own
  noise, which more repeats shrink; a cell is stable when it is within the protocol's target.
  ``speedup_cv``: the coefficient of variation of the per-repeat estimates (geometric mean over
  requests of the repeat's paired ratios).
  ``speedup_predicted`` is the same estimator over per-(request, repeat) predictions from the
  same pairs' measured step times.

Every consumer (the cell table, the gate's bootstrap, the report, W&B) calls these functions;
none computes AL or speedup itself.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .records import STATUS_OK, RequestRecord, StepRecord

NAN = math.nan


def al_from_counts(accepted, drafts):
    """AL = 1 + accepted / drafts (bonus token included); NaN where nothing was drafted.

    Works on scalars and on numpy arrays (the gate's bootstrap evaluates it per resample).
    """
    if np.ndim(accepted) == 0 and np.ndim(drafts) == 0:
        return 1.0 + float(accepted) / float(drafts) if drafts else NAN
    drafts = np.asarray(drafts, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(drafts > 0, 1.0 + np.asarray(accepted, dtype=float) / drafts, np.nan)


@dataclass(frozen=True)
class Acceptance:
    drafts: int
    drafted: int
    accepted: int  # as the engine counts them: also drafts the output did not keep
    hist: tuple[int, ...]  # hist[k] = drafts that accepted exactly k tokens
    kept: int = -1  # tokens of the drafting steps the output kept; -1 when any request does not say
    accepted_kept: int = -1  # accepted drafts the output kept; -1 when any request does not say

    @property
    def al(self) -> float:
        return al_from_counts(self.accepted, self.drafts)

    @property
    def al_emitted(self) -> float:
        """Emitted-token AL: kept tokens per draft (a step cut by a stop token or the length counts what was kept);
        NaN when the engine did not say what was kept (never silently equal to ``al``)."""
        return self.kept / self.drafts if self.drafts and self.kept >= 0 else NAN

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else NAN

    def per_position(self) -> tuple[float, ...]:
        """Unconditional P(accepted >= k) for k = 1..len(hist)-1."""
        if not self.drafts:
            return ()
        tail = np.cumsum(np.asarray(self.hist[::-1], dtype=float))[::-1]  # tail[k] = #drafts with accepted >= k
        return tuple(float(x) / self.drafts for x in tail[1:])

    def per_position_conditional(self) -> tuple[float, ...]:
        uncond = self.per_position()
        prev = (1.0,) + uncond[:-1]
        return tuple(u / p if p > 0 else NAN for u, p in zip(uncond, prev))


def acceptance(records: Iterable[RequestRecord], depth: int = 0) -> Acceptance:
    """Pool the counters of requests (failed ones excluded); histogram padded to ``depth + 1``."""
    drafts = drafted = accepted = kept = accepted_kept = 0
    kept_known = True
    hist = [0] * (depth + 1)
    for r in records:
        if r.status != STATUS_OK:
            continue
        drafts, drafted, accepted = drafts + r.n_drafts, drafted + r.drafted, accepted + r.accepted
        kept += r.kept if r.kept >= 0 else r.n_drafts + r.accepted  # not known: as the engine counted
        accepted_kept += r.accepted_kept if r.accepted_kept >= 0 else r.accepted
        kept_known = kept_known and (r.kept >= 0 or r.n_drafts == 0)
        for k, n in enumerate(r.accepted_hist):
            if k >= len(hist):
                hist += [0] * (k + 1 - len(hist))
            hist[k] += n
    return Acceptance(drafts, drafted, accepted, tuple(hist), kept if kept_known else -1, accepted_kept if kept_known else -1)


def _ok(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.status == STATUS_OK]


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(np.mean(vals)) if vals else NAN


def al_request_mean(records: Iterable[RequestRecord]) -> float:
    """Mean over requests of each request's AL (1 + accepted / drafts; its repeats pooled)."""
    per: dict[str, list[int]] = {}
    for r in _ok(records):
        acc = per.setdefault(r.request_id, [0, 0])
        acc[0], acc[1] = acc[0] + r.accepted, acc[1] + r.n_drafts
    return _mean([al_from_counts(a, d) for a, d in per.values()])


def speed_bench_turn_lengths(chunks: Sequence[int], finish: str) -> list[int]:
    """The chunk lengths the SPEED-Bench tool counts for one turn's stream.

    Every chunk that carried tokens counts (the prefill's chunk too); when the turn ended on a
    stop token that token is taken off the last chunk, and a last chunk that held only the stop
    token is dropped.
    """
    out = [int(n) for n in chunks if n > 0]
    if out and finish == "stop":
        out[-1] -= 1
        if out[-1] == 0:
            out.pop()
    return out


def speed_bench_lengths(record: RequestRecord) -> list[int] | None:
    """All chunk lengths the SPEED-Bench tool counts for a request (its turns chained); None: no stream known."""
    if not record.chunks or sum(record.turn_chunks) != len(record.chunks):
        return None
    out, start = [], 0
    finish = tuple(record.turn_finish) + ("",) * (len(record.turn_chunks) - len(record.turn_finish))
    for n, fin in zip(record.turn_chunks, finish):
        out += speed_bench_turn_lengths(record.chunks[start : start + n], fin)
        start += n
    return out


def al_speed_bench(records: Iterable[RequestRecord]) -> float:
    """The SPEED-Bench tool's AL: mean over requests of the mean counted chunk length of each request
    (its repeats chained, as one more turn would be). NaN when any request's stream is not known;
    a request with no counted chunk (its only token a stop token) is left out."""
    per: dict[str, list[int]] = {}
    for r in _ok(records):
        lengths = speed_bench_lengths(r)
        if lengths is None:
            return NAN
        per.setdefault(r.request_id, []).extend(lengths)
    als = [float(np.mean(v)) for v in per.values() if v]
    return float(np.mean(als)) if als else NAN


@dataclass(frozen=True)
class LoopRule:
    """The degenerate-output rule (``acceptance.*`` in the config)."""

    max_period: int = 32
    min_repeats: int = 3
    min_tokens: int = 16
    min_frac: float = 0.5

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
    for r in _ok(records):
        bad = any(degenerate_output(t, rule) for t in _turn_outputs(r))
        per[r.request_id] = per.get(r.request_id, False) or bad
    return sum(per.values()) / len(per) if per else NAN


def al_along_output(steps: Sequence[StepRecord], window: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(AL, drafts) per window of ``window`` output positions (by each draft's first token, within its turn)."""
    acc: dict[int, list[int]] = {}
    for s in steps:
        if s.drafted > 0 and s.position >= 0:
            a = acc.setdefault(s.position // window, [0, 0])
            a[0], a[1] = a[0] + s.accepted, a[1] + 1
    if not acc:
        return (), ()
    bins = range(max(acc) + 1)
    return (tuple(al_from_counts(*acc.get(b, (0, 0))) for b in bins),
            tuple(acc.get(b, (0, 0))[1] for b in bins))


def al_by_turn(steps: Sequence[StepRecord]) -> tuple[float, ...]:
    """AL per user turn (``al``'s convention) from the per-step rows."""
    acc: dict[int, list[int]] = {}
    for s in steps:
        if s.drafted > 0:
            a = acc.setdefault(s.turn, [0, 0])
            a[0], a[1] = a[0] + s.accepted, a[1] + 1
    return tuple(al_from_counts(*acc.get(t, (0, 0))) for t in range(max(acc) + 1)) if acc else ()


def iteration_times(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """One record per target iteration (by ``iteration`` id): rows of a batch share a forward and its times."""
    seen, out = set(), []
    for s in steps:
        if s.iteration not in seen:
            seen.add(s.iteration)
            out.append(s)
    return out


def tokens_per_step(steps: Sequence[StepRecord]) -> float:
    """Mean tokens emitted per target iteration per sequence, no-proposal steps included."""
    return float(np.mean([s.emitted for s in steps])) if steps else NAN


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


def predicted_speedup(t_verify_base: float, t_verify_spec: float, t_draft: float, al: float,
                      t_accept_base: float = 0.0, t_accept_spec: float = 0.0) -> float:
    """docs/guidelines.md section 3.1: T_verif(B) * AL / (T_verif(B(1+D)) + T_draft(B, D)).

    A verification is the target's forward plus its acceptance rule (sampling, rejection,
    cache roll-back: ``t_accept``), as in vLLM's runner; an engine whose split has no separate
    acceptance time passes 0 and folds it into ``t_verify``.
    """
    base, denom = t_verify_base + t_accept_base, t_verify_spec + t_accept_spec + t_draft
    if any(math.isnan(x) for x in (base, denom, al)) or denom <= 0:
        return NAN
    return base * al / denom


def low_latency_speedup(al: float, rho: float, depth: int) -> float:
    """docs/guidelines.md section 3.2, B -> 1: AL / (1 + rho * D), rho = L_draft / L_target."""
    return al / (1.0 + rho * depth)


@dataclass(frozen=True)
class Agreement:
    match_rate: float  # fraction of requests whose output equals the baseline's
    token_match_rate: float  # leading matched tokens / baseline tokens
    first_divergence: int  # smallest first-mismatch position over requests; -1 if none


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> int:
    """Index of the first differing token; -1 if equal (a length difference counts as a mismatch)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return -1 if len(a) == len(b) else min(len(a), len(b))


def agreement(baseline: Iterable[RequestRecord], other: Iterable[RequestRecord]) -> Agreement:
    """Token-level agreement of ``other`` with ``baseline``, matched by request id."""
    base = {r.request_id: r.output_ids for r in baseline if r.status == STATUS_OK}
    pairs = [(base[r.request_id], r.output_ids) for r in other if r.status == STATUS_OK and r.request_id in base]
    if not pairs:
        return Agreement(NAN, NAN, -1)
    firsts = [first_mismatch(a, b) for a, b in pairs]
    matched = sum(len(a) if f < 0 else f for (a, _), f in zip(pairs, firsts))
    total = sum(len(a) for a, _ in pairs)
    divergences = [f for f in firsts if f >= 0]
    return Agreement(
        match_rate=sum(f < 0 for f in firsts) / len(pairs),
        token_match_rate=matched / total if total else NAN,
        first_divergence=min(divergences) if divergences else -1,
    )


@dataclass(frozen=True)
class SpeedupEstimate:
    point: float
    low: float  # percentile bootstrap interval at ``confidence``
    high: float
    cv: float  # across repeats (std / mean of per-repeat estimates); NaN with one repeat
    n_requests: int
    n_repeats: int
    samples: np.ndarray  # bootstrap estimates (for pooling across cells); empty when not bootstrapped

    @property
    def rel_half_width(self) -> float:
        return (self.high - self.low) / 2 / self.point if self.point > 0 else NAN


def geomean(values, axis: int | None = None):
    """Geometric mean of the positive finite values (the rest left out; NaN where none): how
    speedups and other ratios average, here and in the gate and the report."""
    import warnings

    x = np.asarray(values, dtype=float)
    x = np.where(np.isfinite(x) & (x > 0), x, np.nan)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # nothing usable: NaN, as it should be
        out = np.exp(np.nanmean(np.log(x), axis=axis)) if x.size else np.float64(NAN)
    return float(out) if np.ndim(out) == 0 else out


def speedup_of(ratios):
    """The speedup estimator on paired ratios ``[..., request, repeat]``: each request's median
    over its repeats, then the geometric mean over requests (non-finite ratios left out)."""
    import warnings

    r = np.asarray(ratios, dtype=float)
    r = np.where(np.isfinite(r) & (r > 0), r, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a request with no finite ratio: left out
        return geomean(np.nanmedian(r, axis=-1), axis=-1)


def paired_speedup(ratios: np.ndarray, confidence: float = 0.95, n_resamples: int = 1000,
                   rng: np.random.Generator | None = None, requests: bool = True) -> SpeedupEstimate:
    """The speedup estimator (see the module docstring) from paired ratios [request, repeat].

    ``requests=True``: the interval resamples requests and repeats (what the cell reports);
    ``False``: repeats only, the prompts held fixed -- the measurement's own noise, which more
    repeats shrink (the protocol's stopping rule and ``stable`` use it). With one repeat (and, for
    ``requests=True``, one request) there is nothing to resample: the interval is NaN, not [point, point].
    NaN entries (a request with one token, a failed pass) are left out; a request with no
    finite ratio is dropped.
    """
    r = np.asarray(ratios, dtype=float)
    if r.ndim == 1:
        r = r[:, None]
    r = np.where(np.isfinite(r) & (r > 0), r, np.nan)
    r = r[~np.all(np.isnan(r), axis=1)] if r.size else r
    n = r.shape[0] if r.ndim == 2 else 0
    m = r.shape[1] if n else 0
    if n == 0:
        return SpeedupEstimate(NAN, NAN, NAN, NAN, 0, 0, np.empty(0))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        point = float(speedup_of(r))
        per_repeat = geomean(r, axis=0) if m > 1 else np.array([point])
        per_repeat = per_repeat[np.isfinite(per_repeat)]
        cv = float(np.std(per_repeat, ddof=1) / np.mean(per_repeat)) if per_repeat.size > 1 else NAN
        if m < 2 and (not requests or n < 2):  # one repeat says nothing of the noise: no interval, not a zero-width one
            return SpeedupEstimate(point, NAN, NAN, cv, n, m, np.empty(0))
        rng = rng if rng is not None else np.random.default_rng(0)
        rows = rng.integers(0, n, size=(n_resamples, n)) if requests else np.broadcast_to(np.arange(n), (n_resamples, n))
        cols = rng.integers(0, m, size=(n_resamples, n, m))
        boot = r[rows[:, :, None], cols]  # [resample, request, repeat]
        est = np.asarray(speedup_of(boot))
    est = est[np.isfinite(est)]
    tail = (1.0 - confidence) / 2
    low, high = (np.quantile(est, [tail, 1.0 - tail]) if est.size else (point, point))
    return SpeedupEstimate(point, float(low), float(high), cv, n, m, est)


def geomean_interval(points, lows, highs, confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of per-cell speedups and its interval (the headline over categories).

    Each cell's percentile interval is read as a normal interval on the log scale
    (se = log(high / low) / (2 z)); cells are independent measurements, so the log-mean's
    standard error is sqrt(sum se^2) / n. Cells without a finite interval are left out.
    """
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    rows = [(p, lo, hi) for p, lo, hi in zip(points, lows, highs)
            if all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (p, lo, hi))]
    if not rows:
        return NAN, NAN, NAN
    logs = np.log([p for p, _, _ in rows])
    se = np.array([math.log(hi / lo) / (2 * z) for _, lo, hi in rows])
    mean, err = float(logs.mean()), float(np.sqrt((se ** 2).sum()) / len(rows))
    return math.exp(mean), math.exp(mean - z * err), math.exp(mean + z * err)


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """True when two intervals share a point (a tie); False when either is missing."""
    if not all(math.isfinite(x) for x in (*a, *b)):
        return False
    return a[0] <= b[1] and b[0] <= a[1]


def _by_request_repeat(records, value) -> dict:
    return {(r.request_id, r.repeat): value(r) for r in records if r.status == STATUS_OK}


def tpot_ratios(base: Sequence[RequestRecord], spec: Sequence[RequestRecord]) -> np.ndarray:
    """Paired TPOT ratios [request, repeat] of requests measured in both runs (NaN where one is missing)."""
    b, s = _by_request_repeat(base, lambda r: r.tpot), _by_request_repeat(spec, lambda r: r.tpot)
    return _matrix({k: b[k] / s[k] if s[k] > 0 else NAN for k in b.keys() & s.keys()})


def tpot_ratio_table(frame) -> tuple[list[str], np.ndarray]:
    """(request ids, paired TPOT ratios [request, repeat]) from a requests table (the results store's
    ``requests/<cell>.parquet``: columns request_id, role, status, tpot, repeat); a table written
    before repeats existed counts as one repeat."""
    ok = frame[frame["status"] == STATUS_OK]
    if "repeat" not in ok.columns:
        ok = ok.assign(repeat=0)
    spec, base = ok[ok["role"] == "spec"], ok[ok["role"] == "baseline"]
    ids = sorted(set(spec["request_id"]) & set(base["request_id"]))
    tb = base.drop_duplicates(["request_id", "repeat"]).pivot(index="request_id", columns="repeat", values="tpot")
    ts = spec.drop_duplicates(["request_id", "repeat"]).pivot(index="request_id", columns="repeat", values="tpot")
    reps = sorted(set(tb.columns) & set(ts.columns)) if ids else []
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = tb.loc[ids, reps].to_numpy(float) / ts.loc[ids, reps].to_numpy(float) if ids else np.empty((0, 0))
    return ids, ratios.reshape(len(ids), len(reps))


def _matrix(values: dict) -> np.ndarray:
    ids = sorted({i for i, _ in values})
    reps = sorted({r for _, r in values})
    out = np.full((len(ids), len(reps)), np.nan)
    for (i, rep), v in values.items():
        out[ids.index(i), reps.index(rep)] = v
    return out


def _or_zero(x: float) -> float:
    """A phase the engine did not time (NaN) costs nothing extra in the prediction."""
    return 0.0 if math.isnan(x) else x


def predicted_ratios(base_steps: Sequence[StepRecord], spec_steps: Sequence[StepRecord]) -> np.ndarray:
    """Per (request, repeat): T_verif(B) * tokens/step / (T_verif(B(1+D)) + T_draft(B, D)) from that pair's steps
    (each verification with its acceptance step, ``predicted_speedup``)."""
    def group(steps):
        out: dict = {}
        for s in steps:
            out.setdefault((s.request_id, s.repeat), []).append(s)
        return out

    gb, gs = group(base_steps), group(spec_steps)
    values = {}
    for key in gb.keys() & gs.keys():
        vb, vs = _mean([s.t_verify for s in gb[key]]), _mean([s.t_verify for s in gs[key]])
        if math.isnan(vb) or math.isnan(vs):
            continue

        values[key] = predicted_speedup(vb, vs, _or_zero(_mean([s.t_draft for s in gs[key]])), tokens_per_step(gs[key]),
                                        _or_zero(_mean([s.t_accept for s in gb[key]])),
                                        _or_zero(_mean([s.t_accept for s in gs[key]])))
    return _matrix(values) if values else np.empty((0, 0))


def acceptance_metrics(records: Sequence[RequestRecord], steps: Sequence[StepRecord], depth: int,
                       cfg=None) -> dict:
    """The acceptance columns of a cell on every convention (``cfg``: ``config.AcceptanceConfig``)."""
    ok = _ok(records)
    acc = acceptance(ok, depth)
    window = int(getattr(cfg, "window", 16))
    by_pos, drafts_pos = al_along_output(steps, window)
    frac = degenerate_frac(ok, LoopRule.from_config(cfg))
    return dict(
        al=acc.al,
        al_request_mean=al_request_mean(ok),
        al_emitted=acc.al_emitted,
        al_speed_bench=al_speed_bench(ok),
        acceptance_rate=acc.rate,
        accepted_per_pos=acc.per_position(),
        accepted_per_pos_cond=acc.per_position_conditional(),
        accepted_hist=acc.hist,
        n_accepted=acc.accepted,
        n_accepted_kept=acc.accepted_kept,
        degenerate_frac=frac,
        degenerate=bool(frac > float(getattr(cfg, "degenerate_max_frac", 0.0))),
        al_window=window,
        al_by_position=by_pos,
        drafts_by_position=drafts_pos,
        al_by_turn=al_by_turn(steps),
    )


def pass_metrics(base, spec, depth: int, greedy: bool, n_gpus: int, confidence: float = 0.95,
                 n_resamples: int = 1000, acceptance_cfg=None) -> dict:
    """Every metric column of a cell from a matched baseline and speculative pass (``GenerateOutput``s)."""
    ok_b = [r for r in base.requests if r.status == STATUS_OK]
    ok_s = [r for r in spec.requests if r.status == STATUS_OK]
    it_b, it_s = iteration_times(base.steps), iteration_times(spec.steps)
    draft = stats_ms([s.t_draft for s in it_s])
    ver = stats_ms([s.t_verify for s in it_s])
    ver_b = stats_ms([s.t_verify for s in it_b])
    tps = tokens_per_step(spec.steps)
    first_b = [r for r in ok_b if r.repeat == min((x.repeat for x in ok_b), default=0)]
    agree = agreement(first_b, ok_s)  # every repeat of the speculative run against the baseline's tokens
    tok_b, tok_s = sum(r.n_tokens for r in ok_b), sum(r.n_tokens for r in ok_s)
    ratios = tpot_ratios(ok_b, ok_s)
    est = paired_speedup(ratios, confidence, n_resamples)
    noise = paired_speedup(ratios, confidence, n_resamples, requests=False)

    def rate(tokens: int, wall: float, gpus: int = 1) -> float:
        return tokens / wall / gpus if wall > 0 and gpus > 0 else NAN  # n_gpus=0 (a CPU run): no per-GPU rate

    return dict(
        **acceptance_metrics(ok_s, spec.steps, depth, acceptance_cfg),
        t_draft_ms=draft[0], t_draft_ms_p50=draft[1], t_draft_ms_p90=draft[2],
        t_verify_ms=ver[0], t_verify_ms_p50=ver[1], t_verify_ms_p90=ver[2],
        t_verify_ms_baseline=ver_b[0],
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
        speedup=est.point,
        speedup_ci_low=est.low,
        speedup_ci_high=est.high,
        speedup_cv=est.cv,
        speedup_noise=noise.rel_half_width,
        n_repeats=est.n_repeats,
        # AL drives the prediction only where every step drafts; tokens/step is the general form
        speedup_predicted=paired_speedup(predicted_ratios(base.steps, spec.steps), confidence, 0).point,
        greedy_match_rate=agree.match_rate if greedy else NAN,
        token_match_rate=agree.token_match_rate if greedy else NAN,
        first_divergence=agree.first_divergence if greedy else -1,
        tokens_per_step=tps,
    )
