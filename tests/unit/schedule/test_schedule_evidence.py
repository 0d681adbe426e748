"""speedbench schedule: a verdict needs a measured, finite interval; the load is what ran; --drafter
takes its own load axis; unstable evidence and extrapolated ranges are said; --verify flags only
intervals apart (issue 36 findings 9, 10, 11, 17; issue 35 items 1-2)."""
import argparse
import json
import math

import pandas as pd
import pytest

from speedbench.schedule import cli
from speedbench.schedule.pick import ScheduleError, build
from speedbench.schedule.verify import check

from tests.unit.schedule.test_schedule_pick import SWEEP, cell, data

NAN = math.nan


def test_nan_speedups_give_no_verdict_and_a_schedule_of_nothing_but_nan_is_an_error():
    rows = [cell(1, d, NAN, NAN, NAN) for d in (1, 2)] + [cell(4, d, NAN, NAN, NAN) for d in (1, 2)]
    with pytest.raises(ScheduleError, match="no load point has a D with a measured, finite speedup interval"):
        build(data(rows))
    # one measured point: the NaN one is listed as no verdict, its range undecided (never K=0 "1 [1, 1]", never the
    # K of another point); with --decide-unstable it is left out of the ranges as before
    sched = build(data(rows[:2] + [cell(4, 1, 1.2, 1.1, 1.3), cell(4, 2, 1.0, 0.9, 1.1)]))
    nan_point = next(c for c in sched.table if c.load == 1)
    assert nan_point.verdict == "no verdict" and not nan_point.decided
    assert sched.ranges == [[1, 3, "undecided"], [4, 4, 1]] and sched.measured_loads == [4]
    assert sched.to_json()["num_speculative_tokens_per_batch_size"] is None
    legacy = build(data(rows[:2] + [cell(4, 1, 1.2, 1.1, 1.3), cell(4, 2, 1.0, 0.9, 1.1)]), decide_unstable=True,
                   extrapolate=True)
    assert legacy.ranges == [[1, 4096, 1]]
    entry = next(e for e in sched.to_json()["table"] if e["load"] == 1)
    assert entry["D"] is None and entry["speedup"] is None and entry["ci"] == [None, None]
    assert any("no verdict at load(s) 1" in n for n in sched.notes())


def test_a_cell_without_an_interval_is_no_candidate():
    rows = [cell(1, 1, 1.2, 1.1, 1.3), cell(1, 4, 3.0, NAN, NAN)]  # D=4: a point and no interval
    assert [(c.load, c.D) for c in build(data(rows)).table] == [(1, 1)]


def test_the_load_is_what_ran_batches_of_1_are_load_1_and_the_extrapolation_is_said():
    rows = [cell(4, 1, 1.2, 1.1, 1.3, batch_size_run=1), cell(4, 2, 1.5, 1.4, 1.6, batch_size_run=1)]
    sched = build(data(rows), extrapolate=True)
    assert [c.load for c in sched.table] == [1] and sched.measured_loads == [1]
    assert sched.ranges == [[1, 4096, 2]] and sched.extrapolated == [2, 4096]
    assert any("loads 2..4096 were not measured" in n for n in sched.notes())
    assert sched.to_json()["extrapolated"] == [2, 4096]


def test_a_load_point_recorded_as_what_ran_is_placed_there():
    # load.concurrency=8 with 2 requests is recorded as concurrency 2 (pipeline.load.columns)
    rows = [cell(1, 1, 1.3, 1.2, 1.4, concurrency=2), cell(1, 1, 1.1, 1.05, 1.2, concurrency=16)]
    sched = build(data(rows))
    assert sched.load_column == "concurrency" and sched.measured_loads == [2, 16]


def test_drafter_takes_the_load_axis_from_its_own_cells_and_an_empty_schedule_is_an_error():
    load_points = [cell(1, d, 1.4, 1.3, 1.5, drafter="dm", concurrency=c) for c in (1, 4) for d in (1, 2)]
    ngram = [cell(b, 2, 1.2, 1.1, 1.3, drafter="ngram") for b in (1, 4)]  # concurrency unset (-1 or absent)
    sched = build(data(load_points + ngram), drafter="ngram")
    assert sched.load_column == "batch_size" and sched.measured_loads == [1, 4]
    only_unset = [cell(1, 2, 1.2, 1.1, 1.3, drafter="ngram", batch_size=0)]
    with pytest.raises(ScheduleError, match="no cell with a batch_size >= 1"):
        build(data(load_points + only_unset), drafter="ngram")


def test_a_choice_on_unstable_cells_says_so():
    rows = [cell(1, 1, 1.2, 1.1, 1.3, stable=False), cell(1, 2, 1.5, 1.4, 1.6, stable=True),
            cell(4, 1, 1.2, 1.1, 1.3, stable=True)]
    sched = build(data(rows), decide_unstable=True)  # decided anyway: the choice says what it rests on
    assert sched.table[0].unstable == "unstable: 1 of 2 cells" and sched.table[1].unstable == ""
    assert sched.unstable_loads == [1] and any("rests on unstable cells" in n for n in sched.notes())
    assert build(data(rows)).table[0].verdict == "undecided"  # by default an unstable point decides nothing


def test_verify_flags_only_intervals_apart():
    # the schedule ran exactly static D=2 at B=1: its point 1.50 is below D=4's 1.60 but the intervals overlap
    rows = SWEEP + [cell(1, 2, 1.50, 1.42, 1.58, schedule="[[1,3,2]]", stable=False),
                    cell(4, 1, 0.70, 0.65, 0.75, schedule="[[1,3,2]]"),
                    cell(8, 1, NAN, NAN, NAN, schedule="[[1,3,2]]")]
    points = {p.load: p for p in check(pd.DataFrame(rows))}
    assert points[1].verdict == "ok" and not points[1].flagged and points[1].unstable == "unstable: 1 of 2 cells"
    assert points[4].verdict == "below" and points[4].flagged
    assert points[8].verdict == "n/a" and not points[8].flagged


def _ns(tmp_path, **kw):
    return argparse.Namespace(**{"out": str(tmp_path / "s.json"), "drafter": None, "context_bucket": None,
                                 "cap": 4096, "verify": False, "extrapolate": False, "decide_unstable": False, **kw})


def _folder(tmp_path, rows):
    run = tmp_path / "run"
    (run / "cells").mkdir(parents=True)
    for r in rows:
        (run / "cells" / f"{r['cell_id']}.json").write_text(json.dumps(
            {"backend": "synthetic", "n_requests": 4, **r}, allow_nan=True))
    return run


def test_cli_exits_2_in_one_line_on_a_folder_of_nan_speedups(tmp_path, capsys):
    run = _folder(tmp_path, [cell(1, d, NAN, NAN, NAN) for d in (1, 2)])
    assert cli.main(_ns(tmp_path, results=[str(run)])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no load point has a D with a measured, finite speedup interval" in err[0]
    assert not (tmp_path / "s.json").exists()


def test_cli_prints_the_evidence_and_the_extrapolation(tmp_path, capsys):
    run = _folder(tmp_path, [cell(4, 1, 1.2, 1.1, 1.3, batch_size_run=1, stable=False)])
    assert cli.main(_ns(tmp_path, results=[str(run)], extrapolate=True, decide_unstable=True)) == 0
    out = capsys.readouterr().out
    assert "note: loads 2..4096 were not measured" in out and "unstable: 1 of 1 cells" in out
    assert json.loads((tmp_path / "s.json").read_text())["measured_loads"] == [1]


def test_k0_carries_no_measured_speedup_of_its_own():
    sched = build(data(SWEEP), decide_unstable=True)
    k0 = next(c for c in sched.table if c.load == 8)
    assert k0.D == 0 and k0.decided and "no D's interval lies above 1" in k0.evidence
    entry = next(e for e in sched.to_json()["table"] if e["load"] == 8)
    assert entry["D"] == 0 and entry["speedup"] is None and entry["ci"] == [None, None]  # never "1 [1, 1]"
    assert entry["best_D"] == 1 and entry["best_speedup"] == 1.02  # the measured number is shown, as the best D's
