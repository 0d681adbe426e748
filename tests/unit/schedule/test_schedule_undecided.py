"""Issue 48 item 2: no deployable verdict from an undecided point. A load point whose best interval straddles 1, or
whose cells are unstable, is ``undecided`` (never K=0) with the budget that would decide it from its own noise;
every row shows the measured speedup; the schedule ends at the largest measured load unless asked to extrapolate;
while a range is undecided no deployable vLLM setting is written."""
import argparse
import json
import math

import pytest

from speedbench.schedule import cli
from speedbench.schedule.pick import UNDECIDED, build, decide_budget
from tests.unit.schedule.test_schedule_pick import cell, data

PROTOCOL = {"config": {"protocol": {"budget_s": 3.0, "target_rel_half_width": 0.02}}}


def issue_sweep(**high):
    """The issue's sweep: C=1 pays clearly; at C=4 the default budget read 1.11 [0.838, 1.46]."""
    return [cell(1, 4, 1.50, 1.40, 1.60, concurrency=1, stable=True, n_repeats=6, extra=PROTOCOL),
            cell(1, 2, 1.30, 1.22, 1.38, concurrency=1, stable=True, n_repeats=6, extra=PROTOCOL),
            cell(4, 4, 1.11, 0.838, 1.46, concurrency=4, stable=True, n_repeats=6, extra=PROTOCOL, **high),
            cell(4, 2, 1.02, 0.90, 1.15, concurrency=4, stable=True, n_repeats=6, extra=PROTOCOL)]


def test_a_point_straddling_1_is_undecided_not_k0_and_names_the_budget_that_decides_it():
    sched = build(data(issue_sweep()))
    high = next(c for c in sched.table if c.load == 4)
    assert high.verdict == UNDECIDED and not high.decided and high.k_label == "undecided"
    assert (high.best_D, high.best_speedup, high.best_ci) == (4, 1.11, (0.838, 1.46))  # the measured number, shown
    # half-width (log) 0.278 against a distance to 1 of log 1.11 = 0.104: (0.278 / 0.104)^2 = 7.1x the 3 s budget
    factor, budget, why = decide_budget(next(r for r in issue_sweep() if r["concurrency"] == 4 and r["num_speculative_tokens"] == 4))
    half, dist = (math.log(1.46) - math.log(0.838)) / 2, math.log(1.11)
    assert factor == pytest.approx((half / dist) ** 2) and budget == pytest.approx(3.0 * factor)
    assert "protocol.budget_s=21" in high.why and "protocol.max_repeats>=43" in high.why and "straddles 1" in high.why
    assert sched.ranges == [[1, 3, 4], [4, 4, UNDECIDED]]  # no K=0 from 4 on; nothing past the largest load
    assert sched.deployable_ranges is None and sched.undecided == [[4, 4]]
    js = sched.to_json()
    assert js["num_speculative_tokens_per_batch_size"] is None and js["deployable"] is False
    assert js["ranges"] == [[1, 3, 4], [4, 4, "undecided"]]
    entry = next(e for e in js["table"] if e["load"] == 4)
    assert entry["K"] == "undecided" and entry["D"] is None and entry["best_speedup"] == 1.11
    assert entry["decide_budget_s"] == pytest.approx(round(3.0 * factor, 4))
    assert not any(k == 0 for _, _, k in sched.ranges)


def test_decide_unstable_decides_the_straddling_point_as_before():
    sched = build(data(issue_sweep()), decide_unstable=True, extrapolate=True)
    assert sched.ranges == [[1, 3, 4], [4, 4096, 0]] and sched.deployable_ranges == sched.ranges
    assert next(c for c in sched.table if c.load == 4).evidence.startswith("no D's interval lies above 1")


def test_an_unstable_point_is_undecided_with_the_budget_its_noise_needs():
    rows = issue_sweep()
    rows[0] = {**rows[0], "stable": False, "speedup_noise": 0.04}  # C=1, D=4: clear of 1, but noise +-4% (target 2%)
    sched = build(data(rows))
    low = next(c for c in sched.table if c.load == 1)
    assert low.verdict == UNDECIDED and "unstable" in low.why and "about 4.0x" in low.why and "budget_s=12" in low.why
    assert sched.ranges == [[1, 4, UNDECIDED]]  # both points undecided: one range


def test_every_point_clearly_below_1_is_k0_and_the_schedule_is_deployable():
    rows = [cell(1, 4, 1.5, 1.4, 1.6, concurrency=1), cell(8, 4, 0.8, 0.7, 0.9, concurrency=8),
            cell(8, 2, 0.9, 0.85, 0.95, concurrency=8)]
    sched = build(data(rows))
    assert sched.ranges == [[1, 7, 4], [8, 8, 0]] and sched.deployable_ranges == sched.ranges
    k0 = next(c for c in sched.table if c.load == 8)
    assert k0.evidence == "every D's interval lies below 1" and (k0.best_D, k0.best_speedup) == (2, 0.9)
    assert any("ends at the largest measured load (8)" in n and "max_num_seqs" in n for n in sched.notes())


def _run_cli(tmp_path, rows, capsys, **kw):
    run = tmp_path / "run"
    (run / "cells").mkdir(parents=True, exist_ok=True)
    for r in rows:
        (run / "cells" / f"{r['cell_id']}.json").write_text(json.dumps({"backend": "synthetic", "n_requests": 4, **r}))
    ns = argparse.Namespace(results=[str(run)], out=str(tmp_path / "s.json"), drafter=None, context_bucket=None,
                            cap=4096, verify=False, **{"extrapolate": False, "decide_unstable": False, **kw})
    code = cli.main(ns)
    return code, capsys.readouterr().out, json.loads((tmp_path / "s.json").read_text())


def test_the_cli_prints_undecided_with_the_measured_speedup_and_writes_no_deployable_setting(tmp_path, capsys):
    code, out, js = _run_cli(tmp_path, issue_sweep(), capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.strip().startswith("4 ") and "undecided" in line)
    assert "1.11" in row and "[0.838, 1.46]" in row and "D=4" in row and "n/a" not in row
    assert "NOT DEPLOYABLE: K undecided at loads 4..4" in out and "--speculative-config" not in out
    assert "num_speculative_tokens_per_batch_size:" not in out and js["num_speculative_tokens_per_batch_size"] is None
    code, out, js = _run_cli(tmp_path, issue_sweep(), capsys, decide_unstable=True)
    assert code == 0 and "--speculative-config" in out and js["num_speculative_tokens_per_batch_size"] == [[1, 3, 4], [4, 4, 0]]


def test_a_point_unstable_from_contention_names_no_budget():
    """Noise within target but contention seen: more budget would not make it stable, and the note says so."""
    rows = issue_sweep()
    rows[0] = {**rows[0], "stable": False, "speedup_noise": 0.01,
               "unstable_reason": "contention: load average 4.0 on 2 CPU(s)"}
    low = next(c for c in build(data(rows)).table if c.load == 1)
    assert low.verdict == UNDECIDED and math.isnan(low.decide_budget_s)
    assert "contention: load average 4.0 on 2 CPU(s)" in low.why and "no budget fixes that" in low.why
