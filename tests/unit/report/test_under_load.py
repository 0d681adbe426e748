"""Report section "speculation under load" from real load-point cells of the synthetic engine (fast)."""
import json

from speedbench.config import BackendConfig, LoadConfig, SloConfig
from speedbench.pipeline import runner
from speedbench.report.build import build_report
from speedbench.report.under_load import stops_paying, verdict
from tests.support.sweep_helpers import make_run


def test_speedup_vs_concurrency_stop_point_and_pareto(tmp_path):
    for c in (1, 2, 8):  # verification cost grows with B(1+D): speculation stops paying as C grows
        run = make_run(tmp_path, "L", per_category=False, load=LoadConfig(concurrency=c, num_requests=8),
                       backend=BackendConfig(name="synthetic", device="cpu", options={"verify_b_ms": 1.0, "noise": 0.005}),
                       slo=SloConfig(tpot_ms=3))
        (cell,) = runner.run_cells(run, progress=False)
        assert cell.concurrency == c and cell.status == "ok"
        assert cell.speedup_throughput > 0 and cell.speedup_throughput_ci_low != cell.speedup_throughput_ci_low  # no send times: no interval
    files = build_report([tmp_path / "L"], tmp_path / "rep", plots=False)
    sec = json.loads(files.json.read_text())["load"]
    assert [p["concurrency"] for p in sec["points"]] == [1, 2, 8]
    assert sec["points"][-1]["verdict"] == "net-negative"
    (line,) = sec["stops_paying"].values()
    assert line.startswith("stops paying at C = ") and "net-negative at C = " in line and "8" in line
    assert {p["series"] for p in sec["pareto"]} == {"baseline (each cell's own)", "ngram"} and len(sec["pareto"]) == 6
    # acceptance and step time by the live batch of each step (a static batch of C: every step has C rows)
    assert sorted({r["live batch"] for r in sec["by_live_batch"]}) == [1, 2, 8]
    assert all(r["step ms"] > 0 and r["AL"] >= 1 for r in sec["by_live_batch"])
    assert "Speculation under load" in files.markdown.read_text()
    # the gate covers load-point cells like any other: the folder against itself passes, every point checked
    from speedbench import cli

    assert cli.main(["gate", "--baseline", str(tmp_path / "L"), "--current", str(tmp_path / "L"),
                     "--json", str(tmp_path / "g.json")]) == 0
    checks = json.loads((tmp_path / "g.json").read_text())["checks"]
    assert len({c["cell_id"] for c in checks if c["metric"] == "speedup" and c["cell_id"] != "ALL"}) == 3


def test_verdicts_and_where_a_drafter_stops_paying():
    import pandas as pd

    assert (verdict(1.1, 1.3), verdict(0.7, 0.9), verdict(0.9, 1.1)) == ("pays", "net-negative", "tie")
    pts = pd.DataFrame({"concurrency": [1, 2, 4, 8], "verdict": ["pays", "pays", "tie", "net-negative"],
                        "stable": [True, True, True, True]})
    line = stops_paying(pts)
    assert line.startswith("stops paying at C = 4; net-negative at C = 8")
    assert line.endswith("[C 1: pays, C 2: pays, C 4: tie, C 8: net-negative]")  # the points behind the verdict
    pts["stable"] = [True, True, False, False]  # unstable points decide nothing, and the line says so
    assert stops_paying(pts).startswith("pays at every measured concurrency (up to 2) (2 unstable point(s) left out)")
    rates = pts.rename(columns={"concurrency": "request_rate"}).assign(stable=True)
    assert stops_paying(rates, "request_rate").startswith("stops paying at rate = 4/s")


def test_the_random_vs_real_line_states_how_far_random_input_moves_al_and_speedup():
    import pandas as pd

    from speedbench.report.common import Section
    from speedbench.report.under_load import _random_line

    rows = [{"dataset": ds, "drafter": "ngram", "num_speculative_tokens": 4, "concurrency": c, "al": al, "speedup": sp}
            for ds, c, al, sp in (("mini", 1, 2.0, 1.5), ("random", 1, 3.0, 2.4), ("mini", 4, 2.0, 0.9), ("random", 4, 3.0, 1.2))]
    sec = Section("load", "t")
    _random_line(sec, pd.DataFrame(rows))
    lines = sec.values["random_vs_real"]
    assert len(lines) == 2 and "C = 1" in lines[0] and "AL 2.00 -> 3.00" in lines[0] and "(x1.60)" in lines[0]
    assert "C = 4" in lines[1] and "speedup 0.90 -> 1.20" in lines[1]
    _random_line(empty := Section("load", "t"), pd.DataFrame(rows[:1]))  # real prompts only: no line
    assert "random_vs_real" not in empty.values


def test_a_duration_per_point_sizes_the_point_from_the_warmup_and_records_it(tmp_path):
    run = make_run(tmp_path, "D", per_category=False, load=LoadConfig(concurrency=2, duration_s=0.5, warmup_requests=4),
                   backend=BackendConfig(name="synthetic", device="cpu", options={"verify_b_ms": 1.0}))
    (cell,) = runner.run_cells(run, progress=False)
    sizing = cell.extra["duration_sizing"]
    assert cell.status == "ok" and sizing["from"] == "warmup" and sizing["num_requests"] >= 2
    assert sizing["num_requests"] == max(2, round(sizing["requests_s"] * 0.5))
    import pandas as pd

    reqs = pd.read_parquet(next((tmp_path / "D").glob("requests/*.parquet")))
    per_window = reqs.groupby(["role", "repeat"]).request_id.apply(lambda s: tuple(sorted(s)))
    assert per_window.nunique() == 1 and len(per_window.iloc[0]) == sizing["num_requests"]  # the same requests each window
