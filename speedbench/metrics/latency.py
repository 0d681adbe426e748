"""Latency and throughput of a load point, per role, from per-request records (docs/load.md).

Definitions (all from the client's clock; a request's repeats pooled with every other request):

* TTFT = send -> first chunk with tokens; E2E = send -> last token (summed over turns);
* TPOT = (t_last - t_first) / (tokens - 1) per request (the records' ``tpot``), so a request
  weighs the same however long it is; ``vllm bench serve`` defines it the same way;
* ITL per chunk (``itl_ms_*``): every gap between two consecutive streamed chunks with tokens
  of one turn, one value per gap, as ``vllm bench serve`` reports ITL. With speculation a chunk
  is one engine step of up to 1 + D tokens, so this ITL is about AL x TPOT and is NOT comparable
  with a baseline's (one token per chunk);
* ITL per token (``itl_token_ms_*``): a gap that ends with a chunk of k tokens counts k times as
  gap / k (the gap spread over the tokens it delivered): comparable across baseline and
  speculation, and the tail a user sees per token;
* statistics: mean, p50, p90, p99 (linear-interpolated percentiles, numpy's default and
  vllm bench's);
* windows: per (role, repeat), first send -> last token of that pass (from ``t_start`` + E2E);
  ``output_tok_s`` = output tokens / window, ``requests_s`` = finished requests / window,
  ``goodput`` = requests meeting every SLO set (``slo.ttft_ms``, ``slo.tpot_ms``,
  ``slo.e2e_ms``) / window (NaN when no SLO is set); each pools the repeats (sums over sums);
* ``speedup_throughput`` / ``speedup_goodput``: per repeat the ratio spec / baseline of that
  repeat's pair of windows, through the same estimator (and interval) as ``speedup``
  (``speedup.paired_speedup``, here with one row: the interval comes from the repeats); a window
  without a positive finite ratio (the baseline met no SLO; speculation met none, ratio 0) is left
  out, counted (``speedup_<x>_windows``: the usable ones) and named with why
  (``speedup_<x>_nan_windows``); fewer than two usable windows give no interval (NaN bounds);
* failures are data: ``failed_requests_*`` counts them; a failed request meets no SLO;
* load points (``windows``): the throughput and goodput intervals also cover the windows' own
  spread (``speedup.window_interval``), as the TPOT speedup's does;
* ``burst_frac``: the share of finished requests (both roles) delivered in a burst: their median
  chunk gap is below ``BURST_GAP_FRAC`` of the point's typical chunk gap (the median over both
  roles' chunks) or below ``BURST_FLOOR_S`` (no engine step is that short; this catches a point
  whose every request came in bursts), i.e. the client read chunks the engine had made over many
  steps in one go (a client, or a server's API process, that lagged: its TPOT and ITL say nothing
  of the engine);
* ``client_cpu_share``: the client's CPU seconds (the harness process, where a server's client
  runs) over the pass windows, as a share of one core (``extra.client`` from the server
  backends; NaN in process, where there is no client); ``client_bound`` when either says the
  client, not the server, set the pace: ``burst_frac`` > ``CLIENT_BOUND_BURST`` or a client
  busier than ``CLIENT_BOUND_CPU`` of a core. A server point's absolute latencies include the
  client's time on this machine.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..columns import LoadPointColumns
from ..records import STATUS_OK, RequestRecord
from .speedup import paired_speedup

NAN = math.nan
STATS = ("mean", "p50", "p90", "p99")
BURST_GAP_FRAC = 0.1  # a request's median chunk gap below this share of the point's typical gap: a burst
BURST_FLOOR_S = 1e-4  # or below this: shorter than any engine step (chunks read from a buffer)
CLIENT_BOUND_BURST = 0.05  # more than this share of requests in bursts: the client lagged
CLIENT_BOUND_CPU = 0.8  # a client busier than this share of one core: it lagged (or soon will)
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


def summary(values: Sequence[float]) -> dict[str, float]:
    """mean, p50, p90, p99 of the finite values; NaN for each when there is none."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {s: NAN for s in STATS}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def gap_tokens(record: RequestRecord) -> list[int] | None:
    """Tokens of the chunk that ends each of the record's ``chunk_gaps`` (None: chunk counts not known)."""
    if not record.chunks or not record.turn_chunks:
        return None
    out: list[int] = []
    start = 0
    for n in record.turn_chunks:
        out += list(record.chunks[start + 1 : start + n])
        start += n
    return out if len(out) == len(record.chunk_gaps) else None


def itl_per_chunk(records: Sequence[RequestRecord]) -> list[float]:
    return [g for r in records if r.status == STATUS_OK for g in r.chunk_gaps]


def itl_per_token(records: Sequence[RequestRecord]) -> list[float]:
    """Each gap spread over the k tokens of the chunk that ended it: k values of gap / k."""
    out: list[float] = []
    for r in records:
        if r.status != STATUS_OK:
            continue
        tokens = gap_tokens(r)
        if tokens is None:
            continue
        for gap, k in zip(r.chunk_gaps, tokens):
            if k > 0:
                out += [gap / k] * k
    return out


def slo_set(slo) -> dict[str, float]:
    """The objectives set, in ms (``config.SloConfig`` or a dict)."""
    if slo is None:
        return {}
    get = slo.get if isinstance(slo, dict) else lambda k: getattr(slo, k, None)
    return {k: float(get(k)) for k in SLO_KEYS if get(k) is not None}


def meets_slo(record: RequestRecord, objectives: dict[str, float]) -> bool:
    """True when the request finished and is within every objective (a missing value meets none)."""
    if record.status != STATUS_OK:
        return False
    values = {"ttft_ms": record.ttft * 1e3, "tpot_ms": record.tpot * 1e3, "e2e_ms": record.e2e * 1e3}
    for key, limit in objectives.items():
        v = values[key]
        if key == "tpot_ms" and record.n_tokens < 2:
            continue  # one token: no TPOT to miss
        if not (math.isfinite(v) and v <= limit):
            return False
    return True


def windows(records: Sequence[RequestRecord]) -> dict[int, float]:
    """Per repeat: seconds from the pass's first send to its last token (NaN when send times are not known)."""
    out: dict[int, float] = {}
    for rep in sorted({r.repeat for r in records}):
        these = [r for r in records if r.repeat == rep]
        starts = [r.t_start for r in these if math.isfinite(r.t_start)]
        ends = [r.t_start + r.e2e for r in these if r.status == STATUS_OK and math.isfinite(r.t_start) and math.isfinite(r.e2e)]
        out[rep] = max(ends) - min(starts) if starts and ends else NAN
    return out


def per_repeat(records: Sequence[RequestRecord], objectives: dict[str, float], wall_s: float = NAN,
               steady: dict[int, dict] | None = None) -> dict[int, dict]:
    """Per repeat: window (s), output tokens, finished and SLO-meeting requests. Without send times the
    pass wall time (``wall_s``, all repeats) is split evenly over the repeats (``shared``: the speedups
    of throughput and goodput then have a point but no interval). ``steady``: {repeat: {"window", "tokens"}}
    of the repeats counted over their steady window (``metrics.steady.window_counts``; ``records`` already
    cut to the requests that finished inside it)."""
    steady = steady or {}
    wins = windows(records) | {rep: c["window"] for rep, c in steady.items()}
    shared = bool(wins) and all(math.isnan(w) for w in wins.values()) and math.isfinite(wall_s)
    if shared:
        wins = {k: wall_s / len(wins) for k in wins}
    out = {}
    for rep, win in wins.items():
        these = [r for r in records if r.repeat == rep]
        ok = [r for r in these if r.status == STATUS_OK]
        out[rep] = {"window": win, "shared": shared, "tokens": sum(r.n_tokens for r in ok), "ok": len(ok),
                    "good": sum(meets_slo(r, objectives) for r in these) if objectives else NAN}
        if rep in steady:
            out[rep]["tokens"] = steady[rep]["tokens"]
    return out


def _rate(rows: dict[int, dict], what: str) -> float:
    wins = [row["window"] for row in rows.values()]
    if not rows or not all(math.isfinite(w) and w > 0 for w in wins):
        return NAN
    return float(sum(row[what] for row in rows.values()) / sum(wins))


WHAT = {"tokens": ("produced no token", "produced no token"), "good": ("met no SLO", "met no SLO")}


def _ratio_speedup(base: dict[int, dict], spec: dict[int, dict], what: str, confidence: float,
                   n_resamples: int, windows: bool = False) -> tuple[float, float, float, int, str]:
    """(point, low, high, usable windows, the windows left out named with why) of spec / baseline of ``what``
    per repeat's pair of windows. A window whose ratio is not a positive finite number (a baseline that met
    no SLO: no ratio; speculation that met none: ratio 0, which no geometric mean takes) is left out of the
    estimate, counted and named; fewer than two usable windows give no interval."""
    ratios, why = [], {}
    for rep in sorted(base.keys() | spec.keys()):
        b, s = base.get(rep), spec.get(rep)
        if b is None or s is None:
            why[rep] = f"no {'baseline' if b is None else 'speculative'} pass"
            continue
        rb = b[what] / b["window"] if b["window"] > 0 else NAN
        rs = s[what] / s["window"] if s["window"] > 0 else NAN
        ratio = rs / rb if rb > 0 and math.isfinite(rs) else NAN
        if not (math.isfinite(rb) and math.isfinite(rs)):
            why[rep] = "a pass without a measured window"
        elif rb <= 0:
            why[rep] = f"the baseline {WHAT[what][0]}"
        elif rs <= 0:
            why[rep] = f"speculation {WHAT[what][1]} (ratio 0)"
        ratios.append(ratio)
    from .speedup import name_windows

    if not ratios:
        return NAN, NAN, NAN, 0, name_windows(why)
    est = paired_speedup(np.array([ratios], dtype=float), confidence, n_resamples, windows=windows)
    if any(row["shared"] for row in (*base.values(), *spec.values())):
        # one wall time split over the repeats: no per-repeat variation to show
        return est.point, NAN, NAN, est.n_repeats, name_windows(why)
    return est.point, est.low, est.high, est.n_repeats, name_windows(why)


def role_columns(records: Sequence[RequestRecord], role: str, objectives: dict[str, float], wall_s: float = NAN,
                 steady: dict[int, dict] | None = None) -> dict:
    """Every per-role column of a load point (``<x>_ms_<stat>_<role>``, rates, failures)."""
    ok = [r for r in records if r.status == STATUS_OK]
    out: dict = {}
    for name, values in (("ttft", [r.ttft for r in ok]), ("tpot", [r.tpot for r in ok]),
                         ("itl", itl_per_chunk(ok)), ("e2e", [r.e2e for r in ok]), ("itl_token", itl_per_token(ok))):
        for stat, v in summary(values).items():
            out[f"{name}_ms_{stat}_{role}"] = v * 1e3
    rows = per_repeat(records, objectives, wall_s, steady)
    out[f"output_tok_s_{role}"] = _rate(rows, "tokens")
    out[f"requests_s_{role}"] = _rate(rows, "ok")
    out[f"goodput_{role}"] = _rate(rows, "good") if objectives else NAN
    out[f"failed_requests_{role}"] = len(records) - len(ok)
    return out


def burst_frac(records: Sequence[RequestRecord], typical: float | None = None) -> float:
    """The share of finished requests with chunk gaps delivered in a burst (see the module docstring);
    ``typical``: the point's typical chunk gap (default: these records' median)."""
    ok = [r for r in records if r.status == STATUS_OK and r.chunk_gaps]
    if not ok:
        return NAN
    if typical is None:
        typical = float(np.median([g for r in ok for g in r.chunk_gaps]))
    limit = max(BURST_GAP_FRAC * typical, BURST_FLOOR_S) if math.isfinite(typical) else BURST_FLOOR_S
    return sum(float(np.median(r.chunk_gaps)) < limit for r in ok) / len(ok)


def client_cost(cpu_s: float, window_s: float, chunks: int) -> dict:
    """A client's CPU seconds over its windows: per chunk received, as a share of one core and of the machine."""
    import os

    cores = os.cpu_count() or 1
    ok = math.isfinite(window_s) and window_s > 0
    return {"cpu_s": cpu_s, "window_s": window_s, "chunks": chunks,
            "cpu_ms_per_chunk": cpu_s / chunks * 1e3 if chunks else NAN,
            "cpu_share": cpu_s / window_s if ok else NAN, "machine_share": cpu_s / window_s / cores if ok else NAN}


def client_columns(base, spec) -> dict:
    """``burst_frac``, ``client_cpu_share`` and ``client_bound`` of a load point (module docstring)."""
    gaps = [g for o in (base, spec) for r in o.requests if r.status == STATUS_OK for g in r.chunk_gaps]
    typical = float(np.median(gaps)) if gaps else NAN
    bursts = [b for b in (burst_frac(base.requests, typical), burst_frac(spec.requests, typical)) if math.isfinite(b)]
    frac = max(bursts) if bursts else NAN
    cpu = [o.extra["client"]["cpu_share"] for o in (base, spec) if isinstance(o.extra.get("client"), dict)
           and o.extra["client"].get("cpu_share") is not None]
    share = max(cpu) if cpu else NAN
    bound = (math.isfinite(frac) and frac > CLIENT_BOUND_BURST) or (math.isfinite(share) and share > CLIENT_BOUND_CPU)
    return {"burst_frac": frac, "client_cpu_share": share, "client_bound": bool(bound)}


def load_point_columns(base, spec, slo=None, confidence: float = 0.95, n_resamples: int = 1000,
                       windows: bool = False, steady: tuple[dict, dict] | None = None) -> LoadPointColumns:
    """The load-point columns of a cell from its matched passes (``GenerateOutput``s, every repeat); the load
    point's own settings (``concurrency``, ``request_rate``) are the run's (``pipeline.load.columns``);
    ``windows``: a load point's intervals cover the windows' spread (module docstring); ``steady``: the
    (baseline, spec) ``metrics.steady.window_counts`` of the steady windows the passes were cut to."""
    objectives = slo_set(slo)
    sb, ss = steady or (None, None)
    out = role_columns(base.requests, "baseline", objectives, base.wall_s, sb)
    out |= role_columns(spec.requests, "spec", objectives, spec.wall_s, ss)
    rb, rs = per_repeat(base.requests, objectives, base.wall_s, sb), per_repeat(spec.requests, objectives, spec.wall_s, ss)
    for name, what in (("throughput", "tokens"), ("goodput", "good")):
        v = _ratio_speedup(rb, rs, what, confidence, n_resamples, windows) if what != "good" or objectives else \
            (NAN, NAN, NAN, -1, "")
        out |= {f"speedup_{name}": v[0], f"speedup_{name}_ci_low": v[1], f"speedup_{name}_ci_high": v[2],
                f"speedup_{name}_windows": v[3], f"speedup_{name}_nan_windows": v[4]}
    return LoadPointColumns(**out, **client_columns(base, spec))
