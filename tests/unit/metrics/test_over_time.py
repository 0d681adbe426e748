"""AL and step time per window along a run (``metrics.over_time``): the series from a real engine's cell,
and the trend test on a series that drifts and one that does not."""
import random

from speedbench.config import BackendConfig
from speedbench.metrics import over_time
from speedbench.pipeline import runner
from tests.support.sweep_helpers import make_run


def test_a_cell_keeps_al_and_step_time_per_window_in_wall_clock_order(tmp_path):
    run = make_run(tmp_path, "T", per_category=False,
                   backend=BackendConfig(name="synthetic", device="cpu", options={"noise": 0.005}))
    (cell,) = runner.run_cells(run, progress=False)
    note = cell.extra["over_time"]
    series = note["windows"]
    assert [w["window"] for w in series] == list(range(len(series))) and len(series) >= over_time.MIN_WINDOWS
    assert all(w["al"] >= 1 and w["step_ms"] > 0 and w["iterations"] >= 1 for w in series)
    assert note["al_trend"]["test"].startswith("OLS slope") and isinstance(note["al_trend"]["drifts"], bool)


def test_the_trend_test_flags_a_drift_and_not_noise():
    rng = random.Random(0)
    flat = [3.0 + rng.gauss(0, 0.05) for _ in range(10)]
    falling = [3.0 - 0.1 * i + rng.gauss(0, 0.05) for i in range(10)]
    t_flat, t_fall = over_time.trend(flat), over_time.trend(falling)
    assert t_fall["drifts"] and t_fall["ci_high"] < 0 and abs(t_fall["slope"] + 0.1) < 0.03
    assert not t_flat["drifts"] and t_flat["ci_low"] < 0 < t_flat["ci_high"]
    assert over_time.trend([1.0, 2.0])["drifts"] is None  # too few windows: no verdict


def test_the_report_shows_each_cells_trend_and_plots_al_per_window(tmp_path):
    import json

    from speedbench.report.build import build_report

    run = make_run(tmp_path, "R", per_category=False,
                   backend=BackendConfig(name="synthetic", device="cpu", options={"noise": 0.005}))
    runner.run_cells(run, progress=False)
    files = build_report([tmp_path / "R"], tmp_path / "rep", plots=True)
    (row,) = json.loads(files.json.read_text())["over_time"]["trends"]
    assert row["windows"] >= over_time.MIN_WINDOWS and row["AL drift"] in ("drift", "none shown")
    assert (tmp_path / "rep" / "al_over_time.png").exists()
    assert "AL and step time over the run" in files.markdown.read_text()
