"""The cell columns of a load point (``metrics.latency`` fills them).

Keyword-only with defaults, so ``CellResult`` keeps its own field order for everything else and
folders written before these columns existed still load (missing = the default: NaN / -1 / inf).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NAN = float("nan")


def load_label(row: Any) -> str:
    """`` C=4`` / `` rate=2/s`` for a cell row that ran a load point ("" otherwise): every name a view
    gives a cell (gate cases, W&B runs) carries it, so two load points never share a name."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    conc, rate = get("concurrency"), get("request_rate")
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    return (f" C={int(conc)}" if num(conc) and conc > 0 else "") + (f" rate={rate:g}/s" if num(rate) else "")


@dataclass(frozen=True, kw_only=True)
class LoadPointColumns:
    # the load point (pipeline.load): -1 = load.concurrency unset (batch_size in flight); inf = all at once
    concurrency: int = -1
    request_rate: float = float("inf")
    # latency percentiles per role (ms): TTFT, TPOT (per request), ITL per chunk, E2E; ITL per token
    ttft_ms_mean_baseline: float = NAN
    ttft_ms_p50_baseline: float = NAN
    ttft_ms_p90_baseline: float = NAN
    ttft_ms_p99_baseline: float = NAN
    ttft_ms_mean_spec: float = NAN
    ttft_ms_p50_spec: float = NAN
    ttft_ms_p90_spec: float = NAN
    ttft_ms_p99_spec: float = NAN
    tpot_ms_mean_baseline: float = NAN
    tpot_ms_p50_baseline: float = NAN
    tpot_ms_p90_baseline: float = NAN
    tpot_ms_p99_baseline: float = NAN
    tpot_ms_mean_spec: float = NAN
    tpot_ms_p50_spec: float = NAN
    tpot_ms_p90_spec: float = NAN
    tpot_ms_p99_spec: float = NAN
    itl_ms_mean_baseline: float = NAN
    itl_ms_p50_baseline: float = NAN
    itl_ms_p90_baseline: float = NAN
    itl_ms_p99_baseline: float = NAN
    itl_ms_mean_spec: float = NAN
    itl_ms_p50_spec: float = NAN
    itl_ms_p90_spec: float = NAN
    itl_ms_p99_spec: float = NAN
    e2e_ms_mean_baseline: float = NAN
    e2e_ms_p50_baseline: float = NAN
    e2e_ms_p90_baseline: float = NAN
    e2e_ms_p99_baseline: float = NAN
    e2e_ms_mean_spec: float = NAN
    e2e_ms_p50_spec: float = NAN
    e2e_ms_p90_spec: float = NAN
    e2e_ms_p99_spec: float = NAN
    itl_token_ms_mean_baseline: float = NAN
    itl_token_ms_p50_baseline: float = NAN
    itl_token_ms_p90_baseline: float = NAN
    itl_token_ms_p99_baseline: float = NAN
    itl_token_ms_mean_spec: float = NAN
    itl_token_ms_p50_spec: float = NAN
    itl_token_ms_p90_spec: float = NAN
    itl_token_ms_p99_spec: float = NAN
    # throughput per role over the pass windows (first send -> last token), every repeat pooled
    output_tok_s_baseline: float = NAN
    output_tok_s_spec: float = NAN
    requests_s_baseline: float = NAN
    requests_s_spec: float = NAN
    goodput_baseline: float = NAN  # requests/s meeting every SLO set (slo.*); NaN when none is set
    goodput_spec: float = NAN
    failed_requests_baseline: int = 0  # failures are data: counted over every repeat
    failed_requests_spec: int = 0
    # speedups of throughput and goodput (spec / baseline per repeat; the speedup estimator over repeats)
    speedup_throughput: float = NAN
    speedup_throughput_ci_low: float = NAN
    speedup_throughput_ci_high: float = NAN
    speedup_goodput: float = NAN
    speedup_goodput_ci_low: float = NAN
    speedup_goodput_ci_high: float = NAN
    # their usable windows (repeats with a finite ratio; -1: not counted, an older folder) and the windows
    # left out, named with why ("repeat 1: the baseline met no SLO"; "" when none), as ``speedup_windows``
    speedup_throughput_windows: int = -1
    speedup_throughput_nan_windows: str = ""
    speedup_goodput_windows: int = -1
    speedup_goodput_nan_windows: str = ""
    # the client (metrics.latency): requests delivered in bursts, the client's CPU share of a core, and
    # whether either says the client set the pace (server points; in process there is no client)
    burst_frac: float = NAN
    client_cpu_share: float = NAN
    client_bound: bool = False
