"""One number for one thing; load points kept apart; verdicts carry their evidence (issue 35 items 1-3,
issue 36 findings 9 and 12). Real synthetic-backend folders where a run is needed, hand-built rows else."""
import json
import math

import pandas as pd
import pytest

from speedbench.config import LoadConfig
from speedbench.pipeline import runner
from speedbench.report import build_report
from speedbench.report.mechanism import ranking
from speedbench.report.summary import config_table, recommend

from tests.unit.pipeline.test_load_point_and_overall import _run


@pytest.fixture(scope="module")
def two_load_points(tmp_path_factory):
    root = tmp_path_factory.mktemp("loads")
    for c in (1, 4):
        runner.run_cells(_run(root, "lp", load=LoadConfig(concurrency=c, num_requests=4)), progress=False)
    out = tmp_path_factory.mktemp("loads-report")
    return json.loads(build_report([root / "lp"], out, plots=False).json.read_text()), (out / "report.md").read_text()


def test_load_points_of_different_concurrency_are_separate_configurations(two_load_points):
    values, md = two_load_points
    confs = values["summary"]["configs"]
    assert sorted(c["concurrency"] for c in confs) == [1, 4]  # not one "B=1" configuration
    assert all(c["source"] == "all row" for c in confs)
    assert sorted(p["concurrency"] for p in values["summary"]["recommendation"]) == [1, 4]
    assert sorted(r["concurrency"] for r in values["g5"]["ranking"]) == [1, 4]
    assert sorted(values["g5"]["by_category"]) == ["C=1", "C=4"]  # named by the load point, never "B = 1"
    assert "B = 1" not in md.split("## G5")[1].split("\n## ")[0]
    assert md.split("### What to pick")[1].lstrip().split("\n\n")[1].startswith("| C | B |")


def test_the_pick_the_summary_and_the_g5_ranking_give_one_interval(two_load_points):
    values, _ = two_load_points
    conf = {c["concurrency"]: c for c in values["summary"]["configs"]}
    for p in values["summary"]["recommendation"]:
        c = conf[p["concurrency"]]
        assert p["interval"] == f"[{c['speedup_low']:.3g}, {c['speedup_high']:.3g}]"
    for r in values["g5"]["ranking"]:
        c = conf[r["concurrency"]]
        assert (r["speedup"], r["interval"]) == (pytest.approx(c["speedup"]),
                                                 f"[{c['speedup_low']:.3g}, {c['speedup_high']:.3g}]")


def row(d, s, lo, hi, schedule="", stable=True, **extra):
    return {"cell_id": f"c{d}{schedule}", "drafter": "dm", "method": "draft_model", "num_speculative_tokens": d,
            "batch_size": 1, "category": "coding", "context_bucket": "", "speedup": s, "speedup_ci_low": lo,
            "speedup_ci_high": hi, "speedup_noise": 0.02, "al": 1.5, "al_speed_bench": 1.4, "t_draft_ms": 0.5,
            "schedule": schedule, "stable": stable, "n_requests": 12, "speedup_predicted": s,
            "greedy_match_rate": 1.0, "degenerate_frac": 0.0, **extra}


def test_schedule_cells_are_labelled_in_the_g5_ranking():
    rank = ranking(pd.DataFrame([row(2, 1.4, 1.3, 1.5), row(4, 1.6, 1.5, 1.7, schedule="[[1,1,4]]")]))
    labels = set(map(str, rank["best D"]))
    assert "4 (schedule [[1,1,4]])" in labels and "2" in labels  # the schedule's cell is never "best D 4" unlabelled


def test_a_pick_without_a_measured_interval_is_no_verdict_and_one_on_unstable_cells_says_so():
    nan = math.nan
    spec = pd.DataFrame([row(2, 1.0, nan, nan)])
    pick = recommend(spec, config_table(spec), False).iloc[0]["pick"]
    assert pick.startswith("no verdict") and "no measured, finite speedup interval" in pick
    spec = pd.DataFrame([row(2, 1.4, 1.3, 1.5, stable=False)])
    conf = config_table(spec)
    pick = recommend(spec, conf, False).iloc[0]["pick"]
    assert pick == "dm D=2 (unstable: 1 of 1 cells)" and conf.iloc[0]["source"] == "its one cell"
    # one cell: its own interval, not a log-normal reconstruction
    assert (conf.iloc[0]["speedup_low"], conf.iloc[0]["speedup_high"]) == (1.3, 1.5)
