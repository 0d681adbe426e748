"""Calibrated slowdowns (speedbench.gate.slowdown) on the real runs of tests/data/history (README there)."""
import statistics
import math
from pathlib import Path

import pytest

from speedbench.gate import load_config
from speedbench.gate.slowdown import Probe, calibrate, load_calibration, next_delay, read_slowed_run

DATA = Path(__file__).resolve().parents[2] / "data" / "history"
BASE = [DATA / "step" / f"run-{i:02d}" for i in range(1, 6)]
SLOWED = [DATA / "step" / f"run-{i:02d}" for i in range(6, 11)]


def test_the_recorded_calibration_is_the_line_through_its_probes():
    cal = load_calibration(DATA, 0.03)
    assert [p.run for p in cal.probes] == ["calib3-0", "calib3-1"]
    assert math.isclose(next_delay(cal.probes, 0.03), cal.delay_ms, rel_tol=1e-12)
    lo, hi = sorted(p.delay_ms for p in cal.probes)
    assert lo * 0.9 < cal.delay_ms < hi  # 3% lies between the probes' 3.2% and 5.7%, near the smaller


def test_next_delay_scales_the_odds_and_doubles_when_nothing_was_lost():
    assert math.isclose(next_delay([Probe(1.0, 0.5, "a")], 0.5), 1.0)
    assert next_delay([Probe(1.0, 0.1, "a")], 0.2) > 2.0  # odds 0.25 / odds 0.111: 2.25 ms
    assert next_delay([Probe(0.3, 0.0, "a"), Probe(0.5, -0.01, "b")], 0.05) == 1.0


def test_each_committed_slowed_run_states_the_loss_it_achieved():
    """The series' slowed runs were measured with their request tables (not committed: the gate's pooled
    interval needs them); each slowdown.json holds the ratios against runs 1-5 and the median's loss."""
    for run in SLOWED:
        rec = read_slowed_run(run)
        assert rec["references"] == [f"base-{i}" for i in range(1, 6)]
        assert len(rec["pooled_ratios"]) == 5
        assert math.isclose(rec["achieved_loss"], 1 - statistics.median(rec["pooled_ratios"]))
        assert math.isclose(rec["delay_ms"], load_calibration(DATA, 0.03).delay_ms)
    assert read_slowed_run(BASE[0]) is None


def test_an_asked_loss_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="asked loss"):
        calibrate(1.5, BASE, load_config("ci"), lambda k, d: SLOWED[0])
