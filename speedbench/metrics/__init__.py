"""Every metric, defined once, with its convention beside it; one module per concern.

* ``acceptance``: AL on every peer's convention, acceptance rate, per-position and per-turn AL;
* ``degenerate``: repetition loops in the output (whose AL says nothing about real text);
* ``timing``: the draft/verify split, TTFT, TPOT, throughput;
* ``speedup``: the paired speedup estimator and its intervals, geometric means;
* ``prediction``: the speedup predicted from measured step times;
* ``agreement``: token-level agreement with the baseline's outputs;
* ``latency``: a load point's latency percentiles, throughput and goodput.

Each concern gives its cell columns as one typed group (``AcceptanceColumns``, ``TimingColumns``,
...; ``pipeline.cells.assemble_cell`` puts them in the row). Every consumer (the cell table, the
gate's bootstrap, the report, W&B) calls these functions; none computes AL or speedup itself.
The names below are the package's public surface (``from speedbench import metrics``;
``metrics.acceptance`` and ``metrics.agreement`` are the functions; their modules are
``speedbench.metrics.acceptance`` and ``speedbench.metrics.agreement``).
"""
from __future__ import annotations

from .acceptance import (
    Acceptance, AcceptanceColumns, acceptance, acceptance_columns, al_along_output, al_by_turn, al_from_counts,
    al_request_mean, al_speed_bench, speed_bench_lengths, speed_bench_turn_lengths,
)
from .agreement import Agreement, AgreementColumns, agreement, agreement_columns, first_mismatch
from .degenerate import DegenerateColumns, LoopRule, degenerate_columns, degenerate_frac, degenerate_output, repetition_tail
from .prediction import PredictionColumns, low_latency_speedup, predicted_ratios, predicted_speedup, prediction_columns
from .speedup import (
    SpeedupColumns, SpeedupEstimate, geomean, geomean_interval, intervals_overlap, paired_speedup, speedup_columns,
    speedup_of, tpot_ratio_table, tpot_ratios,
)
from .timing import (
    TimingColumns, iqr, iteration_times, median, other_time, overhead_fraction, span_error, stats_ms, timed_split,
    timing_columns, tokens_per_step,
)

__all__ = [
    "Acceptance", "AcceptanceColumns", "acceptance", "acceptance_columns", "al_along_output", "al_by_turn",
    "al_from_counts", "al_request_mean", "al_speed_bench", "speed_bench_lengths", "speed_bench_turn_lengths",
    "Agreement", "AgreementColumns", "agreement", "agreement_columns", "first_mismatch",
    "DegenerateColumns", "LoopRule", "degenerate_columns", "degenerate_frac", "degenerate_output", "repetition_tail",
    "PredictionColumns", "low_latency_speedup", "predicted_ratios", "predicted_speedup", "prediction_columns",
    "SpeedupColumns", "SpeedupEstimate", "geomean", "geomean_interval", "intervals_overlap", "paired_speedup",
    "speedup_columns", "speedup_of", "tpot_ratio_table", "tpot_ratios",
    "TimingColumns", "iqr", "iteration_times", "median", "other_time", "overhead_fraction", "span_error", "stats_ms",
    "timed_split", "timing_columns", "tokens_per_step",
]
