"""Timing columns (ms unless named otherwise; ``metrics.timing`` fills them)."""
from __future__ import annotations

from dataclasses import dataclass

NAN = float("nan")


@dataclass(frozen=True, kw_only=True)
class TimingColumns:
    t_draft_ms: float = NAN
    t_draft_ms_p50: float = NAN
    t_draft_ms_p90: float = NAN
    t_verify_ms: float = NAN
    t_verify_ms_p50: float = NAN
    t_verify_ms_p90: float = NAN
    t_verify_ms_baseline: float = NAN  # T_verif(B): plain decode forward at the same batch size
    t_accept_ms: float = NAN
    t_step_ms_baseline: float = NAN
    t_step_ms_spec: float = NAN
    overhead_frac: float = NAN  # loop time outside draft/verify/accept, as a fraction of step time
    t_other_ms: float = NAN  # step time outside draft, verification and acceptance (mean per iteration)
    ttft_ms_baseline: float = NAN
    ttft_ms_spec: float = NAN
    tpot_ms_baseline: float = NAN
    tpot_ms_spec: float = NAN
    tpot_ms_spec_iqr: float = NAN
    tpot_ms_baseline_iqr: float = NAN
    tokens_per_s_user_baseline: float = NAN
    tokens_per_s_user_spec: float = NAN
    tokens_per_s_baseline: float = NAN
    tokens_per_s_spec: float = NAN
    tokens_per_s_per_gpu_baseline: float = NAN
    tokens_per_s_per_gpu_spec: float = NAN
    timing_source: str = ""  # how t_draft/t_verify/t_accept were obtained, or "missing: <reason>"
    split_error: float = NAN  # (sum of the timed iterations) / (the engine's own decode span) - 1
