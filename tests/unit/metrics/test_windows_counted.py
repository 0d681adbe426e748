"""Issue 48 item 3: no interval from one window. Every speedup (TPOT, throughput, goodput) counts its usable
windows; a window without a finite ratio is counted and named (a cell column, a warning), never dropped
silently; fewer than two usable windows give no interval (NaN bounds), never a zero-width one, and never a
stable cell."""
import logging
import math

import numpy as np
import pytest

from speedbench.backends.base import GenerateOutput
from speedbench.config import LoadConfig, SloConfig
from speedbench.metrics import latency as ml
from speedbench.metrics.speedup import paired_speedup, speedup_columns
from speedbench.pipeline.cells import CellKey, assemble_cell, window_notes
from tests.support.sweep_helpers import make_run
from tests.unit.metrics.test_load_metrics import rec


def passes(role, ttft_by_repeat, tpot=0.01, n_req=2):
    return GenerateOutput([rec(f"r{i}", role, ttft=ttft, tpot=tpot, t_start=0.0, repeat=rep)
                           for rep, ttft in enumerate(ttft_by_repeat) for i in range(n_req)], wall_s=1.0)


SLO = SloConfig(ttft_ms=100)


def test_a_goodput_whose_baseline_met_no_slo_in_one_repeat_has_no_interval_and_names_it():
    """The issue's case: the baseline met no SLO in one of two repeats. Its ratio is no number: the speedup rests
    on one window, so it has no interval (it was [0.704, 0.704]) and the left-out window is named."""
    base = passes("baseline", [0.05, 0.30])  # repeat 1: every baseline TTFT 300 ms > 100 ms
    spec = passes("spec", [0.05, 0.05])
    cols = ml.load_point_columns(base, spec, SLO, windows=True)
    assert math.isfinite(cols.speedup_goodput)
    assert math.isnan(cols.speedup_goodput_ci_low) and math.isnan(cols.speedup_goodput_ci_high)
    assert cols.speedup_goodput_windows == 1
    assert cols.speedup_goodput_nan_windows == "repeat 1: the baseline met no SLO"
    assert cols.speedup_throughput_windows == 2 and cols.speedup_throughput_nan_windows == ""
    assert cols.speedup_throughput_ci_low < cols.speedup_throughput_ci_high  # two windows: a real interval


def test_speculation_meeting_no_slo_is_a_named_window_not_a_silent_gap():
    base = passes("baseline", [0.05, 0.05, 0.05])
    spec = passes("spec", [0.05, 0.30, 0.06])  # repeat 1: speculation met no SLO (ratio 0: no geometric mean)
    cols = ml.load_point_columns(base, spec, SLO, windows=True)
    assert cols.speedup_goodput_windows == 2
    assert cols.speedup_goodput_nan_windows == "repeat 1: speculation met no SLO (ratio 0)"
    assert cols.speedup_goodput_ci_low < cols.speedup_goodput_ci_high


def test_one_usable_row_of_windows_never_gives_a_zero_width_interval():
    est = paired_speedup(np.array([[0.704, np.nan]]), windows=True)
    assert est.point == pytest.approx(0.704) and est.n_repeats == 1 and est.nan_windows == (1,)
    assert math.isnan(est.low) and math.isnan(est.high)
    est = paired_speedup(np.array([[0.704, np.nan]]))  # not a load point: one request, one usable repeat
    assert math.isnan(est.low) and math.isnan(est.high)


def test_a_load_points_tpot_speedup_from_one_window_has_no_interval():
    """Many requests but one usable window: at a load point the windows are the independent units."""
    tpot = lambda role: [rec(f"r{i}", role, tpot=0.02 if role == "baseline" else 0.01 * (1 + 0.1 * i), repeat=0)
                         for i in range(6)]  # noqa: E731
    one_token = lambda role: [rec(f"r{i}", role, tpot=math.nan, n=1, repeat=1) for i in range(6)]  # noqa: E731
    cols = speedup_columns(tpot("baseline") + one_token("baseline"), tpot("spec") + one_token("spec"), windows=True)
    assert math.isfinite(cols.speedup) and cols.speedup_windows == 1
    assert math.isnan(cols.speedup_ci_low) and math.isnan(cols.speedup_ci_high)
    assert cols.speedup_nan_windows.startswith("repeat 1: no request with a TPOT in both passes")
    # not a load point: the prompts still vary, so one repeat keeps its interval over requests (never zero width)
    lockstep = speedup_columns(tpot("baseline"), tpot("spec"))
    assert lockstep.speedup_windows == 1 and lockstep.speedup_ci_low < lockstep.speedup_ci_high


def test_a_repeat_whose_requests_all_failed_is_counted_and_named():
    ok = lambda role, rep: [rec(f"r{i}", role, tpot=0.02 if role == "baseline" else 0.01, repeat=rep) for i in range(3)]  # noqa: E731
    failed = [rec(f"r{i}", "spec", repeat=2, status="failed") for i in range(3)]
    cols = speedup_columns(ok("baseline", 0) + ok("baseline", 1) + ok("baseline", 2), ok("spec", 0) + ok("spec", 1) + failed)
    assert cols.speedup_windows == 2 and cols.speedup_nan_windows == "repeat 2: no request finished in both passes"


def test_a_cell_with_a_one_window_goodput_is_unstable_and_warns(tmp_path, caplog):
    run = make_run(tmp_path, "x", load=LoadConfig(concurrency=2), slo=SLO)
    key = CellKey.for_run(run, "coding", "")
    with caplog.at_level(logging.WARNING, logger="speedbench.pipeline.cells"):
        cell = assemble_cell(key, passes("baseline", [0.05, 0.30]), passes("spec", [0.05, 0.05]), warmup_s=0.0,
                             device="cpu", n_gpus=0, run=run)
    assert cell.speedup_goodput_windows == 1 and math.isnan(cell.speedup_goodput_ci_low)
    assert cell.stable is False
    assert "speedup_goodput from 1 usable window(s), no interval (repeat 1: the baseline met no SLO)" in cell.unstable_reason
    assert any("speedup_goodput left out repeat 1: the baseline met no SLO" in r.getMessage() for r in caplog.records)


def test_window_notes_say_nothing_when_every_window_was_usable():
    assert window_notes("c", {"speedup_goodput": 1.1, "speedup_goodput_windows": 3, "speedup_goodput_nan_windows": ""}) == ""
