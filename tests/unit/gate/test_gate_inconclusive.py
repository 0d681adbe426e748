"""Issue 48 item 1: the gate never calls a regression what it could not measure.

On the committed CI baseline (a real run of the CI benchmark, 3 stable cells of 12 prompts x >= 6
repeats), copied and changed as a second run would differ: a speedup loss measured while the machine
ran the same no-speculation steps at another speed (the step ratio beyond ``max_step_ratio``, or within
it a loss the machine's measured effect could explain), or behind unstable cells whose own noise covers
it, is INCONCLUSIVE (exit 5, with what to do), never REGRESSED; the same loss at the same machine speed
stays REGRESSED (exit 1); AL verdicts stay hard.
"""
import json
import math
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from speedbench import cli
from speedbench.gate import load_config, run_gate
from speedbench.gate.core import EXIT_INCONCLUSIVE, GateConfigError
from tests.unit.gate.test_gate import slow_down_spec

BASELINE = Path(__file__).resolve().parents[3] / "results" / "baselines" / "ci-default"


def copy_baseline(dst: Path) -> Path:
    shutil.copytree(BASELINE, dst)
    return dst


def edit_cells(folder: Path, **changes) -> None:
    """Set or scale (a callable) fields of every cell row of ``folder``."""
    for path in (folder / "cells").glob("*.json"):
        row = json.loads(path.read_text())
        for key, value in changes.items():
            row[key] = value(row[key]) if callable(value) else value
        path.write_text(json.dumps(row))


def gate(current: Path, tmp_path: Path, *extra) -> tuple[int, dict]:
    rc = cli.main(["gate", "--baseline", str(BASELINE), "--current", str(current), "--config", "ci",
                   "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml"), *extra])
    return rc, json.loads((tmp_path / "g.json").read_text())


def pooled_note(out: dict) -> str:
    return next(c["note"] for c in out["checks"] if c["cell_id"] == "ALL" and c["metric"] == "speedup")


def speedup_verdicts(out: dict) -> dict[str, str]:
    return {c["cell_id"]: c["verdict"] for c in out["checks"] if c["metric"] == "speedup"}


@pytest.fixture
def slowed(tmp_path):
    """The baseline's run with every speculative request 12% slower: a speedup loss of 11%, as a slowed
    drafter costs (its no-speculation steps untouched)."""
    current = copy_baseline(tmp_path / "current")
    slow_down_spec(current, 1.12)
    return current


def test_a_loss_at_the_same_machine_speed_is_a_regression(slowed, tmp_path):
    rc, out = gate(slowed, tmp_path)
    assert rc == 1 and out["verdict"] == "regression"
    assert speedup_verdicts(out)["ALL"] == "regressed"
    assert out["step_ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("steps", [2.12, 1 / 2.12, 1.7, 1 / 1.7])
def test_a_loss_while_the_machine_ran_at_another_speed_is_inconclusive(slowed, tmp_path, capsys, steps):
    """The issue's case: the no-speculation steps took 2.12x the baseline run's; and just past 1.6 either way."""
    edit_cells(slowed, t_step_ms_baseline=lambda v: v * steps)
    rc, out = gate(slowed, tmp_path)
    assert rc == EXIT_INCONCLUSIVE == 5 and out["verdict"] == "inconclusive" and out["exit_code"] == 5
    assert speedup_verdicts(out)["ALL"] == "inconclusive"
    assert {c["verdict"] for c in out["checks"] if c["metric"] == "al"} == {"pass"}  # AL judged as usual
    printed = capsys.readouterr().out
    assert "INCONCLUSIVE" in printed and "REGRESSED" not in printed and "FAIL" not in printed
    tail = printed.strip().splitlines()[-1]
    assert tail.startswith("INCONCLUSIVE") and "one machine" in tail and "scripts/gate-ci.sh" in tail
    assert "beyond max_step_ratio 1.6" in pooled_note(out)
    suite = ET.parse(tmp_path / "g.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == 0 and [e.get("type") for e in suite.iter("error")] == ["inconclusive"]


def test_a_pass_while_the_machine_ran_at_another_speed_is_inconclusive_too(tmp_path):
    """A slower machine raises the n-gram drafter's speedup (its fixed cost weighs less): a pass then says nothing."""
    current = copy_baseline(tmp_path / "current")
    edit_cells(current, t_step_ms_baseline=lambda v: v * 2.12)
    rc, out = gate(current, tmp_path)
    assert rc == 5 and speedup_verdicts(out)["ALL"] == "inconclusive"


@pytest.mark.parametrize("steps", [1.15, 1 / 1.45])
def test_within_max_step_ratio_a_loss_beyond_the_machines_effect_is_still_a_regression(slowed, tmp_path, steps):
    """An 11% loss while the machine ran 15% slower, or 45% faster (as back-to-back runs did on a busy machine):
    the machine at its steepest measured elasticity (0.12) moves a speedup by at most 1.7% / 4.6%: still a loss."""
    edit_cells(slowed, t_step_ms_baseline=lambda v: v * steps)
    rc, out = gate(slowed, tmp_path)
    assert rc == 1 and speedup_verdicts(out)["ALL"] == "regressed"
    assert f"holds with the machine's allowance x{max(steps, 1 / steps) ** 0.12:.3f}" in pooled_note(out)


def test_within_max_step_ratio_a_loss_the_machine_could_explain_is_inconclusive(tmp_path):
    """A 4% loss is a regression at the same machine speed, but not when the steps took 1.45x: the machine alone
    may move the speedup by 1.45 ** 0.12 = 4.6%."""
    current = copy_baseline(tmp_path / "current")
    slow_down_spec(current, 1.04)
    assert gate(current, tmp_path)[0] == 1
    edit_cells(current, t_step_ms_baseline=lambda v: v * 1.45)
    rc, out = gate(current, tmp_path)
    assert rc == 5 and speedup_verdicts(out)["ALL"] == "inconclusive"
    assert "regressed only without the machine's allowance x1.046 (steps 1.45x)" in pooled_note(out)


def test_an_al_regression_stays_a_regression_whatever_the_machine(slowed, tmp_path):
    """AL is machine-independent: fewer accepted tokens fail the gate (exit 1) even when the speedup is inconclusive."""
    edit_cells(slowed, t_step_ms_baseline=lambda v: v * 2.12)
    for path in (slowed / "requests").glob("*.parquet"):
        frame = pd.read_parquet(path)
        frame.loc[frame.role == "spec", "accepted"] = frame.loc[frame.role == "spec", "accepted"] // 2
        frame.to_parquet(path, index=False)
    rc, out = gate(slowed, tmp_path)
    assert rc == 1 and out["verdict"] == "regression"
    assert {c["verdict"] for c in out["checks"] if c["metric"] == "al"} == {"regressed"}
    assert speedup_verdicts(out)["ALL"] == "inconclusive"


def test_a_loss_within_the_unstable_cells_own_noise_is_inconclusive(tmp_path):
    """Unstable current cells whose measurement noise (+-6%) covers a 4% loss: not measured, exit 5."""
    current = copy_baseline(tmp_path / "current")
    slow_down_spec(current, 1.04)
    assert gate(current, tmp_path)[0] == 1  # stable cells: the loss is measured
    edit_cells(current, stable=False, speedup_noise=0.06, unstable_reason="measurement noise +-6.0% above the target")
    rc, out = gate(current, tmp_path)
    assert rc == 5 and speedup_verdicts(out)["ALL"] == "inconclusive"
    assert "regressed only without the unstable cells' own noise" in pooled_note(out)


def test_a_loss_beyond_the_unstable_cells_noise_is_still_a_regression(slowed, tmp_path):
    """The slowed run measured on a busy machine (cells unstable from contention, their noise +-1.5%): an 11% loss
    is far beyond that noise, so it stays REGRESSED."""
    edit_cells(slowed, stable=False, speedup_noise=0.015, unstable_reason="contention: load average 3.1 on 2 CPU(s)")
    rc, out = gate(slowed, tmp_path)
    assert rc == 1 and speedup_verdicts(out)["ALL"] == "regressed"
    assert "holds with the unstable cells' own noise" in pooled_note(out)


def test_an_unstable_cell_without_a_noise_estimate_decides_no_regression(slowed, tmp_path):
    edit_cells(slowed, stable=False, speedup_noise=math.nan, unstable_reason="one repeat (max_repeats reached)")
    rc, out = gate(slowed, tmp_path)
    assert rc == 5 and speedup_verdicts(out)["ALL"] == "inconclusive"


def test_unstable_cells_never_unmake_a_pass(tmp_path):
    """Instability only takes back a change the interval claims: the same run, unstable, still passes."""
    current = copy_baseline(tmp_path / "current")
    edit_cells(current, stable=False, speedup_noise=math.nan, unstable_reason="one repeat (max_repeats reached)")
    rc, out = gate(current, tmp_path)
    assert rc == 0 and speedup_verdicts(out)["ALL"] == "pass"


def test_a_speedup_point_without_per_request_records_claims_no_regression(tmp_path):
    """Without per-request records the gate compares points: no interval (NaN bounds, never [r, r]); a speedup
    loss from a point is inconclusive, an AL loss from a point (exact at temperature 0) is judged."""
    current = copy_baseline(tmp_path / "current")
    shutil.rmtree(current / "requests")
    edit_cells(current, speedup=lambda v: v / 1.2)
    rc, out = cli.main(["gate", "--baseline", str(BASELINE), "--current", str(current), "--config", "default",
                        "--json", str(tmp_path / "g.json")]), json.loads((tmp_path / "g.json").read_text())
    assert rc == 5, out
    cells = [c for c in out["checks"] if c["cell_id"] != "ALL"]
    assert cells and all(c["low"] is None and c["high"] is None for c in cells)  # NaN in the JSON: no interval
    assert {c["verdict"] for c in cells if c["metric"] == "speedup"} == {"inconclusive"}
    assert {c["verdict"] for c in cells if c["metric"] == "al"} == {"pass"}


@pytest.mark.parametrize("key, value", [("max_step_ratio", "1.0"), ("max_step_ratio", "0.9"), ("max_step_ratio", "fast"),
                                        ("max_speed_elasticity", "1.5"), ("max_speed_elasticity", "-0.1")])
def test_the_machine_limits_are_checked(tmp_path, key, value):
    conf = tmp_path / "g.yaml"
    conf.write_text(f"speedup: {{tolerance: 0.02}}\n{key}: {value}\n")
    with pytest.raises(GateConfigError, match=key):
        load_config(conf)


def test_identical_folders_pass_with_exit_0():
    report = run_gate(BASELINE, BASELINE, load_config("ci"))
    assert report.exit_code == 0 and not report.inconclusive
