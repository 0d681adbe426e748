"""``speedbench history``: change points over a series of gated runs.

The series are real: tests/data/history/ holds two 10-run series of the CI benchmark
(conf/experiment/ci_gate.yaml) of one checkout, made by scripts/gate_history_series.py (see its
README): ``step`` has the drafter slowed to cost 3% of the pooled speedup (calibrated on measured
paired loss) from run 6 on, ``flat`` shares runs 1-5 and has five more unslowed runs. Only the files
the history reads were kept (provenance's commit and time, cell files trimmed to the fields read).
"""
import json
import shutil
from pathlib import Path

import pytest

from speedbench import cli
from speedbench.gate import load_config
from speedbench.gate.history import POOLED, REGRESSED, analyse, read_history

DATA = Path(__file__).resolve().parents[2] / "data" / "history"


def history(*args) -> int:
    return cli.main(["history", *map(str, args)])


def pooled_speedup_changes(report):
    return [c for c in report.changes if c.metric == "speedup" and c.cell == POOLED]


def test_the_committed_series_are_ten_real_runs_in_time_order():
    for name in ("step", "flat"):
        runs = read_history(DATA / name)
        assert len(runs) == 10
        assert {r.sha[:7] for r in runs} == {"2f67bd5", "036de04"}  # the checkout got a commit mid-series (README)
        assert [r.time for r in runs] == sorted(r.time for r in runs)
        assert all(0.5 < r.values[("speedup", POOLED)] < 2 for r in runs)
    step, flat = read_history(DATA / "step"), read_history(DATA / "flat")
    assert [r.path.name for r in step[:5]] == [r.path.name for r in flat[:5]]  # runs 1-5 are shared
    slowed = [json.loads((r.path / "slowdown.json").read_text()) for r in step[5:]]
    assert all(rec["asked_loss"] == 0.03 for rec in slowed)  # each slowed run says what it achieved
    assert all(not (r.path / "slowdown.json").exists() for r in step[:5] + flat)


def test_a_3_percent_loss_from_run_6_is_found_at_run_6(capsys):
    report = analyse(read_history(DATA / "step"), load_config("ci"))
    (change,) = pooled_speedup_changes(report)
    assert 4 <= change.index <= 6, change  # run 6 (0-based 5), plus or minus one
    assert 0.94 < change.ratio < 0.995 and change.high < 1.0, change  # a loss, the interval below 1
    assert not [c for c in report.changes if c.metric == "al"]  # greedy AL: the same tokens every run
    history(DATA / "step", "--config", "ci")
    out = capsys.readouterr().out
    assert "speedup all cells pooled" in " ".join(out.split())
    assert f"began at run {change.index + 1}" in out
    assert f"before: runs 1-{change.index}" in out and f"after: runs {change.index + 1}-10" in out


def test_the_same_series_without_the_loss_shows_no_change(capsys):
    report = analyse(read_history(DATA / "flat"), load_config("ci"))
    assert not pooled_speedup_changes(report)
    assert not [c for c in report.changes if c.verdict == REGRESSED]
    assert history(DATA / "flat", "--config", "ci") == 0
    assert "PASS: no change beyond the tolerance" in capsys.readouterr().out


def test_a_loss_beyond_the_tolerance_exits_1(capsys):
    report = analyse(read_history(DATA / "step"), load_config("ci"), tolerance=0.0)
    (change,) = pooled_speedup_changes(report)
    assert change.verdict == REGRESSED  # the interval's upper end is below 1 - 0
    assert history(DATA / "step", "--config", "ci", "--tolerance", "0") == 1
    assert "FAIL: 1 change(s) lost more than the tolerance" in capsys.readouterr().out


def test_too_few_runs_judge_nothing(tmp_path, capsys):
    for run in sorted((DATA / "step").iterdir())[:4]:
        shutil.copytree(run, tmp_path / run.name)
    assert history(tmp_path, "--config", "ci") == 0
    assert "too few runs to look for a change (4" in capsys.readouterr().out


def copy_series(tmp_path) -> Path:
    dest = tmp_path / "series"
    shutil.copytree(DATA / "flat", dest)
    return dest


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""  # nothing judged before the input was read whole
    return lines[0]


def test_a_run_without_provenance_is_one_line_naming_the_file_exit_2(tmp_path, capsys):
    series = copy_series(tmp_path)
    (series / "run-07" / "provenance.json").unlink()
    assert history(series) == 2
    line = one_error_line(capsys)
    assert str(series / "run-07" / "provenance.json") in line and "missing" in line


@pytest.mark.parametrize("prov, what", [({"git": {"sha": "abc"}}, "no created_utc"),
                                        ({"created_utc": "2026-12-07T12:00:00+00:00", "git": {"sha": None}}, "no git.sha"),
                                        ("[1, 2", "unreadable provenance")])
def test_a_provenance_without_commit_or_time_is_one_line_exit_2(tmp_path, capsys, prov, what):
    series = copy_series(tmp_path)
    path = series / "run-03" / "provenance.json"
    path.write_text(prov if isinstance(prov, str) else json.dumps(prov))
    assert history(series) == 2
    line = one_error_line(capsys)
    assert str(path) in line and what in line


def test_a_corrupt_cell_file_is_one_line_naming_it_exit_2(tmp_path, capsys):
    series = copy_series(tmp_path)
    cell = sorted((series / "run-02" / "cells").glob("*.json"))[0]
    cell.write_text('{"speedup": ')
    assert history(series) == 2
    assert str(cell) in one_error_line(capsys)


def test_a_folder_without_runs_or_a_bad_option_is_exit_2(tmp_path, capsys):
    assert history(tmp_path) == 2
    assert "no results folder under it" in one_error_line(capsys)
    assert history(tmp_path / "absent") == 2
    assert "not a folder" in one_error_line(capsys)
    assert history(DATA / "flat", "--tolerance", "1.5") == 2
    assert "--tolerance" in one_error_line(capsys)
    assert history(DATA / "flat", "--config", "no-such-gate-config") == 2
    assert "no-such-gate-config" in one_error_line(capsys)


def test_json_output_names_each_change_and_its_runs(tmp_path):
    out = tmp_path / "h.json"
    assert history(DATA / "step", "--config", "ci", "--tolerance", "0", "--json", out) == 1
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 10 and data["exit_code"] == 1
    (change,) = [c for c in data["changes"] if c["metric"] == "speedup" and c["cell"] == POOLED]
    assert change["after"] == [change["run"], 10] and change["before"] == [1, change["run"] - 1]
    assert change["sha"] == data["runs"][change["run"] - 1]["sha"]


@pytest.mark.parametrize("min_size", [2, 3, 4, 5])
def test_the_step_is_found_and_the_flat_series_stays_flat_at_every_min_size(min_size):
    cfg = load_config("ci")
    (change,) = pooled_speedup_changes(analyse(read_history(DATA / "step"), cfg, min_size=min_size))
    assert 4 <= change.index <= 6, change
    assert not analyse(read_history(DATA / "flat"), cfg, min_size=min_size).changes
