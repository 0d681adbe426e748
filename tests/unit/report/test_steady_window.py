"""Report section "which window each load point counted" (``report.steady_window``) from real load-point
cells of the synthetic engine: a point counted whole says so; a point run with ``load.steady_state`` lists
each pass's window, or says it had none and counted every request."""
import json

from speedbench.config import BackendConfig, LoadConfig
from speedbench.pipeline import runner
from speedbench.report.build import build_report
from tests.support.sweep_helpers import make_run


def test_each_load_point_says_which_window_it_counted(tmp_path):
    for steady in (False, True):
        run = make_run(tmp_path, "W", per_category=False,
                       load=LoadConfig(concurrency=2, num_requests=8, steady_state=steady),
                       backend=BackendConfig(name="synthetic", device="cpu", options={"noise": 0.005}))
        (cell,) = runner.run_cells(run, progress=False)
        assert cell.status == "ok"
    files = build_report([tmp_path / "W"], tmp_path / "rep", plots=False)
    sec = json.loads(files.json.read_text())["steady_window"]
    windows = sec["windows"]
    assert [w["window"] for w in windows if w["pass"] == "both"] == ["whole pass"]  # the point without the option
    on = [w for w in windows if w["pass"] != "both"]
    assert {w["pass"].split()[0] for w in on} == {"baseline", "spec"}
    for w in on:  # every pass names its window; one without a steady window says why and kept every request
        assert w["window"].startswith("steady: ") or (w["window"] == "whole pass (no steady window)" and w["warning"] not in ("", "none"))
    assert sec["steady_passes"] == len(on)
    assert "Which window each load point counted" in files.markdown.read_text()
