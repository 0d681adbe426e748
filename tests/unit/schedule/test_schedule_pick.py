"""speedbench schedule: best D per load with intervals, vLLM ranges, --verify, the report section."""
import argparse
import json

import pandas as pd
import pytest

from speedbench.results.load import ReportData
from speedbench.schedule import cli
from speedbench.schedule.pick import ScheduleError, build, to_ranges
from speedbench.schedule.verify import check

from tests.support.synthetic_results import shared_results


def cell(load, d, s, lo, hi, drafter="dm", bucket="", schedule="", **extra):
    return {"cell_id": f"{drafter}-{load}-{d}-{bucket}-{schedule}", "status": "ok", "derived": True, "category": "all",
            "drafter": drafter, "method": "none" if d == 0 else "draft_model", "num_speculative_tokens": d,
            "batch_size": load, "context_bucket": bucket, "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi,
            "schedule": schedule, **extra}


def data(rows) -> ReportData:
    return ReportData(roots=[], cells=pd.DataFrame(rows), provenance=[])


SWEEP = [
    # B=1: D=4 best, D=2 overlaps it -> the tie goes to D=2
    cell(1, 1, 1.30, 1.25, 1.35), cell(1, 2, 1.55, 1.45, 1.62), cell(1, 4, 1.60, 1.50, 1.70),
    # B=2: the same choice
    cell(2, 1, 1.25, 1.20, 1.30), cell(2, 2, 1.50, 1.42, 1.58), cell(2, 4, 1.52, 1.40, 1.60),
    # B=4: only D=1 is clearly above 1
    cell(4, 1, 1.10, 1.04, 1.16), cell(4, 2, 1.05, 0.97, 1.12), cell(4, 4, 0.90, 0.85, 0.95),
    # B=8: nothing beats plain decoding -> K=0
    cell(8, 1, 1.02, 0.96, 1.08), cell(8, 2, 0.95, 0.90, 1.00), cell(8, 4, 0.80, 0.75, 0.85),
]


def test_best_d_per_load_with_ties_to_the_smaller_d_and_k0_where_nothing_beats_plain_decoding():
    """Where no D beats plain decoding, K=0 only with --decide-unstable: B=8's D=1 straddles 1 (issue 48 item 2:
    tests/unit/schedule/test_schedule_undecided.py); the rest of the rules as they were."""
    sched = build(data(SWEEP), decide_unstable=True, extrapolate=True)
    assert [(c.load, c.D) for c in sched.table] == [(1, 2), (2, 2), (4, 1), (8, 0)]
    assert sched.ranges == [[1, 3, 2], [4, 7, 1], [8, 4096, 0]]
    assert sched.table[0].cells == ["dm-1-2--"] and len(sched.table[3].cells) == 3  # K=0: every cell is the evidence
    assert sched.to_json()["num_speculative_tokens"] == 2


def test_ranges_start_at_1_merge_equal_k_and_end_at_the_cap():
    assert to_ranges({2: 3, 4: 3, 16: 1}, cap=256) == [[1, 15, 3], [16, 256, 1]]
    assert to_ranges({1: 0}, cap=64) == [[1, 64, 0]]


def test_the_load_axis_is_concurrency_when_the_cells_have_it():
    rows = [cell(1, d, s, lo, hi, concurrency=c) for c, (d, s, lo, hi) in
            [(1, (2, 1.5, 1.4, 1.6)), (1, (1, 1.2, 1.1, 1.3)), (16, (2, 0.9, 0.8, 0.95)), (16, (1, 1.2, 1.1, 1.3))]]
    sched = build(data(rows))
    assert sched.load_column == "concurrency" and sched.ranges == [[1, 15, 2], [16, 16, 1]]
    assert build(data(rows), extrapolate=True).ranges == [[1, 15, 2], [16, 4096, 1]]


def test_context_buckets_take_the_smallest_k_unless_one_is_chosen():
    rows = [cell(1, 2, 1.5, 1.4, 1.6, bucket="short"), cell(1, 1, 1.2, 1.1, 1.3, bucket="short"),
            cell(1, 2, 1.0, 0.9, 1.1, bucket="long"), cell(1, 1, 1.2, 1.1, 1.3, bucket="long")]
    assert build(data(rows)).ranges == [[1, 1, 1]]
    assert build(data(rows), context_bucket="short").ranges == [[1, 1, 2]]
    assert {(c.load, c.context_bucket, c.D) for c in build(data(rows)).table} == {(1, "short", 2), (1, "long", 1)}


def test_several_drafters_are_refused_unless_one_is_named():
    rows = SWEEP + [cell(1, 2, 1.1, 1.05, 1.2, drafter="ng")]
    with pytest.raises(ScheduleError, match="several drafter configurations .*--drafter NAME"):
        build(data(rows))
    assert build(data(rows), drafter="ng").ranges == [[1, 1, 2]]


def test_verify_flags_a_load_point_where_the_schedule_falls_outside_the_best_static_interval():
    rows = SWEEP + [cell(1, 2, 1.58, 1.5, 1.65, schedule="[[1,3,2]]"),  # within D=4's [1.50, 1.70]
                    cell(4, 1, 0.70, 0.65, 0.75, schedule="[[1,3,2]]"),  # a collapse: below D=1's [1.04, 1.16]
                    cell(8, 0, 1.00, 0.98, 1.02, schedule="[[1,3,2]]")]  # K=0 there: within D=1's [0.96, 1.08]
    points = {p.load: p for p in check(pd.DataFrame(rows))}
    assert points[1].verdict == "ok" and points[1].best_D == 4
    assert points[4].verdict == "below" and points[4].flagged and points[4].best_D == 1
    assert points[8].verdict == "ok"
    assert build(data(rows), decide_unstable=True, extrapolate=True).ranges == [[1, 3, 2], [4, 7, 1], [8, 4096, 0]]  # schedule cells are not candidates


def test_cli_writes_the_json_and_refuses_several_drafters_in_one_line(tmp_path_factory, tmp_path, capsys):
    run = shared_results(tmp_path_factory)  # tiny_draft and ngram, D in 1,2,4, B in 1,4 (synthetic backend)
    ns = dict(out=str(tmp_path / "s.json"), drafter=None, context_bucket=None, cap=1024, verify=False,
              extrapolate=True, decide_unstable=True)  # the synthetic sweep's points: K from the intervals alone
    assert cli.main(argparse.Namespace(results=[str(run)], **ns)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "several drafter configurations" in err[0] and "ngram" in err[0]
    assert cli.main(argparse.Namespace(results=[str(run)], **{**ns, "drafter": "ngram"})) == 0
    got = json.loads((tmp_path / "s.json").read_text())
    ranges = got["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and ranges[-1][1] == 1024 and all(r[2] in (0, 1, 2, 4) for r in ranges)
    assert {e["load"] for e in got["table"]} == {1, 4} and all(e["cells"] for e in got["table"])
    assert cli.main(argparse.Namespace(results=[str(run)], **{**ns, "verify": True})) == 2  # no schedule cells


def test_the_report_has_the_schedule_section(tmp_path_factory):
    from speedbench.report.draft_schedule import build as section
    from speedbench.results.load import load

    out = tmp_path_factory.mktemp("schedule-report")
    sec = section(load([shared_results(tmp_path_factory)]), out)
    assert set(sec.values) == {"tiny_draft", "ngram"}
    assert sec.values["ngram"]["num_speculative_tokens_per_batch_size"][0][0] == 1
    assert (out / "schedule_ngram.png").stat().st_size > 0 and (out / "schedule_tiny_draft.png").exists()


def ctx_cell(load, d, buckets, schedule=""):
    """A cell whose live-context buckets (edge -> speedup, interval) come from its extra.by_context."""
    return cell(load, d, 1.0, 0.9, 1.1, schedule=schedule, extra={"by_context": [
        {"bucket": e, "steps": 10, "al": 2.0, "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi}
        for e, (s, lo, hi) in buckets.items()]})


CTX_SWEEP = [  # short contexts: D=4 pays at B=1; long: only D=1 at B=1; B=4 long: nothing
    ctx_cell(1, 1, {64: (1.2, 1.1, 1.3), 512: (1.15, 1.05, 1.25)}),
    ctx_cell(1, 4, {64: (1.8, 1.7, 1.9), 512: (0.9, 0.8, 0.95)}),
    ctx_cell(4, 1, {64: (1.1, 1.05, 1.15), 512: (0.98, 0.9, 1.05)}),
    ctx_cell(4, 4, {64: (1.4, 1.3, 1.5), 512: (0.7, 0.6, 0.8)}),
]


def test_by_context_gives_the_best_d_per_load_and_live_context_and_one_vllm_schedule_per_bucket():
    from speedbench.engine.schedule import k_at, parse_plan
    from speedbench.schedule.by_context import build as by_context

    sched = by_context(data(CTX_SWEEP), cap=64, decide_unstable=True, extrapolate=True)  # (4, 512) straddles 1
    table = {(c.load, c.context_bucket): c.D for c in sched.base.table}
    assert table == {(1, "64"): 4, (1, "512"): 1, (4, "64"): 4, (4, "512"): 0}
    assert sched.per_bucket == {64: [[1, 64, 4]], 512: [[1, 3, 1], [4, 64, 0]]}
    plan = parse_plan(sched.plan)  # the reference engine takes it as it is
    assert [k_at(plan, b, c, 6) for b, c in ((1, 10), (4, 511), (1, 512), (4, 9000))] == [4, 4, 1, 0]
    js = sched.to_json()
    assert js["by"] == "batch,context" and js["num_speculative_tokens_per_batch_size_by_context"]["512"][1] == [4, 64, 0]


def test_schedule_by_context_cli_emits_and_verifies(tmp_path, capsys):
    from speedbench.results.store import ResultsStore  # noqa: F401 - the CLI reads a folder: write one
    run = tmp_path / "r"
    (run / "cells").mkdir(parents=True)
    rows = CTX_SWEEP + [ctx_cell(1, 4, {64: (1.75, 1.65, 1.85), 512: (0.6, 0.5, 0.7)}, schedule="[[0,511,[[1,64,4]]]]")]
    for r in rows:
        (run / "cells" / f"{r['cell_id']}.json").write_text(json.dumps({**r, "derived": False}))
    ns = dict(out=str(tmp_path / "s.json"), drafter=None, context_bucket=None, cap=64, verify=False, by="context",
              decide_unstable=True, extrapolate=True)
    code = cli.main(argparse.Namespace(results=[str(run)], **ns))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "context >= 512: num_speculative_tokens_per_batch_size: [[1, 3, 1], [4, 64, 0]]" in out
    assert "drafter.schedule='[[0,511,[[1,64,4]]],[512," in out
    assert json.loads((tmp_path / "s.json").read_text())["schedule_by_context"][0] == [0, 511, [[1, 64, 4]]]
    assert cli.main(argparse.Namespace(results=[str(run)], **{**ns, "verify": True})) == 1  # 512: below D=1
    out = capsys.readouterr().out
    assert "1 of 2 load points flagged" in out
    bare = tmp_path / "bare"
    (bare / "cells").mkdir(parents=True)
    (bare / "cells" / "a.json").write_text(json.dumps({**cell(1, 2, 1.2, 1.1, 1.3), "derived": False}))
    assert cli.main(argparse.Namespace(results=[str(bare)], **ns)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "per-context speedup" in err[0]
