"""`speedbench gate` on stored results: config errors, matching, statistics, outputs."""
import json
import shutil
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from speedbench import cli
from speedbench.gate import GateConfigError, load_config, run_gate
from speedbench.results import ResultsStore
from tests.support.sweep_helpers import copy_results, shared_results


def gate(baseline, current, *extra):
    return cli.main(["gate", "--baseline", str(baseline), "--current", str(current), *extra])


def slow_down_spec(folder, factor):
    """Make every speculative request ``factor`` times slower (cell rows and per-request records)."""
    for path in (folder / "requests").glob("*.parquet"):
        frame = pd.read_parquet(path)
        frame.loc[frame.role == "spec", "tpot"] *= factor
        frame.to_parquet(path, index=False)
        cell = folder / "cells" / f"{path.stem}.json"
        row = json.loads(cell.read_text())
        row["tpot_ms_spec"] *= factor
        row["speedup"] /= factor
        cell.write_text(json.dumps(row))


def test_a_folder_against_itself_passes_with_exact_ratios(tmp_path, capsys):
    base = shared_results()
    assert gate(base, base, "--json", str(tmp_path / "g.json")) == 0
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["verdict"] == "pass" and out["exit_code"] == 0
    table = ResultsStore(base).cells().set_index("cell_id")
    table = table[~table.derived.astype(bool)]  # the derived overall row is not gated: its cells are
    per_cell = [c for c in out["checks"] if c["cell_id"] != "ALL"]
    assert len(per_cell) == 2 * len(table)
    for c in per_cell:  # point estimates from per-request records equal the cell table's values
        assert c["baseline"] == pytest.approx(table.loc[c["cell_id"], c["metric"]], rel=1e-12)
        assert c["ratio"] == 1.0
        if c["metric"] == "al":  # deterministic: the same requests give the same AL in every resample
            assert c["low"] == c["high"] == 1.0
        else:  # each run's repeats are resampled on their own: the interval carries their noise
            assert c["low"] <= 1.0 <= c["high"]
    assert "PASS" in capsys.readouterr().out


def mark_stable(*folders):
    """Cells as a quiet machine measures them (``stable``): the shared run's stability is this machine's state
    (on a busy one, its noise can cover a loss per cell: tests/unit/gate/test_gate_inconclusive.py)."""
    for folder in folders:
        for path in (folder / "cells").glob("*.json"):
            path.write_text(json.dumps({**json.loads(path.read_text()), "stable": True}))


def test_a_slower_speculative_run_fails_with_json_and_junit(tmp_path, capsys):
    baseline, current = copy_results(tmp_path / "baseline"), copy_results(tmp_path / "current")
    mark_stable(baseline, current)
    slow_down_spec(current, 1.6)
    rc = gate(baseline, current, "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml"))
    assert rc == 1
    printed = capsys.readouterr().out
    assert "REGRESSED" in printed and "FAIL" in printed
    checks = json.loads((tmp_path / "g.json").read_text())["checks"]
    assert {c["verdict"] for c in checks if c["metric"] == "speedup"} == {"regressed"}
    assert {c["verdict"] for c in checks if c["metric"] == "al"} == {"pass"}
    suite = ET.parse(tmp_path / "g.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == 4 and int(suite.get("tests")) == len(checks)  # 3 cells + pooled
    assert all(f.get("type") == "regressed" for f in suite.iter("failure"))


def test_metric_gates_only_that_metric_of_the_config(tmp_path, capsys):
    current = copy_results(tmp_path / "current")
    slow_down_spec(current, 1.6)  # a speedup loss: not judged when only AL is gated
    assert gate(shared_results(), current, "--metric", "al", "--json", str(tmp_path / "g.json")) == 0
    checks = json.loads((tmp_path / "g.json").read_text())["checks"]
    assert checks and {c["metric"] for c in checks} == {"al"}
    capsys.readouterr()
    assert gate(shared_results(), current, "--metric", "tpot", "--json", str(tmp_path / "h.json")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--metric tpot" in err[0] and "al, speedup" in err[0], err
    assert not (tmp_path / "h.json").exists()


def test_the_verdict_says_how_fast_the_machine_ran_the_baseline_steps(tmp_path, capsys):
    current = copy_results(tmp_path / "current")
    for cell in (current / "cells").glob("*.json"):  # the same forward passes, 25% slower
        row = json.loads(cell.read_text())
        row["t_step_ms_baseline"] *= 1.25
        cell.write_text(json.dumps(row))
    gate(shared_results(), current, "--json", str(tmp_path / "g.json"))
    assert json.loads((tmp_path / "g.json").read_text())["step_ratio"] == pytest.approx(1.25)
    assert "steps took 1.25x the baseline run's (25% slower)" in capsys.readouterr().out
    gate(shared_results(), shared_results(), "--metric", "al")  # no speedup gated: no speed line
    assert "machine speed" not in capsys.readouterr().out


def test_speed_elasticity_compares_speedups_at_the_baseline_runs_machine_speed(tmp_path):
    """The same speedups on a machine 21% slower: with elasticity 0.5 every speedup ratio is divided by
    1.21 ** 0.5 = 1.1 (interval and pooled row too), and a cell without a step time is left as measured."""
    current = copy_results(tmp_path / "current")
    cells = sorted((current / "cells").glob("*.json"))
    for cell in cells:
        row = json.loads(cell.read_text())
        row["t_step_ms_baseline"] *= 1.21
        cell.write_text(json.dumps(row))
    cfg_path = tmp_path / "g.yaml"
    cfg_path.write_text("speedup: {tolerance: 0.5}\nspeed_elasticity: 0.5\n")
    raw = {(c.cell_id, c.metric): c for c in run_gate(shared_results(), current, load_config("default")).checks}
    adjusted = run_gate(shared_results(), current, load_config(cfg_path))
    for c in adjusted.checks:
        r = raw[(c.cell_id, "speedup")]
        assert (c.ratio, c.low, c.high) == pytest.approx((r.ratio / 1.1, r.low / 1.1, r.high / 1.1)), c
        assert c.cell_id == "ALL" or "speed-adjusted x0.909 (steps 1.21x)" in c.note
    row = json.loads(cells[0].read_text())
    cells[0].write_text(json.dumps({**row, "t_step_ms_baseline": None}))
    lone = next(c for c in run_gate(shared_results(), current, load_config(cfg_path)).checks if c.cell_id == cells[0].stem)
    assert lone.ratio == pytest.approx(raw[(cells[0].stem, "speedup")].ratio) and "not speed-adjusted" in lone.note


def test_per_cell_false_gates_only_the_pooled_row(tmp_path):
    baseline, current = copy_results(tmp_path / "baseline"), copy_results(tmp_path / "current")
    mark_stable(baseline, current)
    slow_down_spec(current, 1.6)
    config = tmp_path / "gate.yaml"
    config.write_text("al: {tolerance: 0.02}\nspeedup: {tolerance: 0.15, per_cell: false}\n")
    assert gate(baseline, current, "--config", str(config), "--junit", str(tmp_path / "g.xml")) == 1
    report = run_gate(baseline, current, load_config(config))
    speed = {c.cell_id: c.verdict for c in report.checks if c.metric == "speedup"}
    assert speed.pop("ALL") == "regressed" and set(speed.values()) == {"info"}
    suite = ET.parse(tmp_path / "g.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) == 1 and int(suite.get("skipped")) == 3


def test_a_slowdown_within_tolerance_passes(tmp_path):
    current = copy_results(tmp_path / "current")
    slow_down_spec(current, 1.05)
    assert gate(shared_results(), current) == 0


def test_missing_and_renamed_cells_are_a_mismatch(tmp_path, capsys):
    current = copy_results(tmp_path / "current")
    ids = sorted(p.stem for p in (current / "cells").glob("*.json"))
    for part, ext in (("cells", "json"), ("requests", "parquet"), ("steps", "parquet")):
        (current / part / f"{ids[0]}.{ext}").rename(current / part / f"{'f' * 16}.{ext}")  # "another config"
    moved = current / "cells" / f"{'f' * 16}.json"
    moved.write_text(json.dumps({**json.loads(moved.read_text()), "cell_id": "f" * 16, "setting_id": "f" * 16}))
    assert gate(shared_results(), current, "--junit", str(tmp_path / "g.xml")) == 3
    printed = capsys.readouterr().out
    assert f"MISSING in current: {ids[0]}" in printed and "new in current (not gated): ffffffffffffffff" in printed
    assert "MISMATCH" in printed
    assert int(ET.parse(tmp_path / "g.xml").getroot().find("testsuite").get("errors")) == 1


def test_no_common_cells_is_a_mismatch_even_without_missing(tmp_path):
    empty = tmp_path / "empty"
    (empty / "cells").mkdir(parents=True)
    report = run_gate(empty, shared_results(), load_config("default"))
    assert report.exit_code == 3 and len(report.new) == 3


def test_a_cell_that_failed_in_the_current_run_fails_the_gate(tmp_path):
    current = copy_results(tmp_path / "current")
    cell = sorted((current / "cells").glob("*.json"))[0]
    row = json.loads(cell.read_text())
    cell.write_text(json.dumps({**row, "status": "failed", "error": "CUDA error", "al": None}))
    report = run_gate(shared_results(), current, load_config("default"))
    assert report.exit_code == 1
    assert {c.verdict for c in report.checks if c.cell_id == cell.stem} == {"failed"}


def test_without_per_request_records_the_gate_compares_points(tmp_path):
    current = copy_results(tmp_path / "current")
    shutil.rmtree(current / "requests")
    slow_down_spec(current, 1.0)  # no-op; the cell rows stay
    report = run_gate(shared_results(), current, load_config("default"))
    assert report.exit_code == 0
    assert all("point estimate" in c.note for c in report.checks if c.cell_id != "ALL")


@pytest.mark.parametrize(
    "text, message",
    [
        ("al: {tolerance: 0.02}\nspeedups: {tolerance: 0.1}\n", "unknown key 'speedups'"),
        ("al: {tolerance: 1.5}\n", "al.tolerance must be in"),
        ("al: 0.02\n", "al must be {tolerance"),
        ("confidence: 0.95\n", "no metric to gate"),
        ("al: {tolerance: 0.02}\nconfidence: 0.2\n", "confidence"),
        ("al: [unclosed\n", "gate config"),
        ("al: {tolerance: 0.02, per_cell: maybe}\n", "al.per_cell must be true or false"),
        ("al: {tolerance: 0.02, per_cell: false}\npooled: false\n", "per_cell: false needs pooled: true"),
        ("speedup: {tolerance: 0.02}\nspeed_elasticity: 1.5\n", "speed_elasticity must be in"),
    ],
)
def test_config_errors_exit_2_naming_the_key(tmp_path, capsys, text, message):
    path = tmp_path / "gate.yaml"
    path.write_text(text)
    with pytest.raises(GateConfigError, match=message.replace("(", r"\(").replace("{", r"\{")):
        load_config(path)
    assert gate(shared_results(), shared_results(), "--config", str(path)) == 2
    assert message.split("'")[0] in capsys.readouterr().err


def test_a_folder_that_is_not_a_results_folder_is_a_usage_error(tmp_path, capsys):
    assert gate(tmp_path, shared_results()) == 2
    assert "not a results folder" in capsys.readouterr().err


def test_shipped_gate_configs_load():
    default, ci = load_config("default"), load_config("ci")
    assert set(default.rules) == set(ci.rules) == {"al", "speedup"}
    assert ci.rules["al"].tolerance <= default.rules["al"].tolerance


def test_committed_ci_baseline_matches_the_ci_benchmark():
    """results/baselines/ci-default must hold exactly the cells conf/experiment/ci_gate.yaml
    produces; if not, regenerate it with scripts/update-baseline.sh."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from speedbench.pipeline.cells import CellKey
    from speedbench.backends.registry import schemas
    from speedbench.config.hydra import register_configs, to_run_config

    GlobalHydra.instance().clear()
    register_configs(schemas())
    with initialize_config_dir(config_dir=str(cli.CONF_DIR), version_base="1.3"):
        run = to_run_config(compose(config_name="config", overrides=["+experiment=ci_gate"]), schemas())
    expected = {CellKey.for_run(run, cat, "").cell_id for cat in run.dataset.categories}
    baseline = ResultsStore(cli.CONF_DIR.parent / "results" / "baselines" / "ci-default").cells()
    measured = baseline[~baseline["derived"].fillna(False).astype(bool)] if "derived" in baseline else baseline
    # a cell's id hashes its prompts too; its setting_id is the settings' alone (a baseline written before
    # setting_id existed has only the cell_id, which was the settings' hash then)
    has_setting = "setting_id" in measured and measured["setting_id"].notna().all()
    ids = measured["setting_id"] if has_setting else measured["cell_id"]
    assert set(ids) == expected, "stale CI baseline: run scripts/update-baseline.sh"
    assert (baseline["category"] == "all").sum() == 1  # and its derived overall row
    assert (baseline.status == "ok").all()


@pytest.mark.parametrize("option", ["--json", "--junit"])
@pytest.mark.parametrize("where", ["under_a_file", "name_too_long", "a_directory"])
def test_an_unwritable_report_file_is_one_line_exit_2_before_a_verdict(option, where, tmp_path, capsys):
    """Exit 1 means a regression: a passing gate that cannot write its report must not exit 1 (nor print PASS)."""
    (tmp_path / "afile").write_text("x")
    target = {"under_a_file": tmp_path / "afile" / "gate.out", "name_too_long": tmp_path / ("g" * 300),
              "a_directory": tmp_path}[where]
    base = shared_results()
    assert gate(base, base, option, str(target)) == 2
    out = capsys.readouterr()
    assert option in out.err and "cannot be written" in out.err and len(out.err.strip().splitlines()) == 1
    assert "PASS" not in out.out  # nothing computed that could be read as a verdict


def test_a_verdict_on_unstable_cells_says_so(tmp_path):
    """Issue 35 item 2: a G-verdict built on unstable cells names them (cell rows and the pooled ALL row)."""
    baseline, current = copy_results(tmp_path / "baseline"), copy_results(tmp_path / "current")
    mark_stable(baseline, current)
    cell = sorted((current / "cells").glob("*.json"))[0]
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "stable": False}))
    report = run_gate(baseline, current, load_config("default"))
    mine = [c for c in report.checks if c.cell_id == cell.stem]
    assert mine and all(c.note.endswith("unstable current cell") for c in mine)
    others = [c for c in report.checks if c.cell_id not in (cell.stem, "ALL")]
    assert others and not any("unstable" in c.note for c in others)
    assert any("1 of" in c.note and "unstable side" in c.note for c in report.checks if c.cell_id == "ALL")


def test_cells_of_different_load_points_carry_different_labels():
    from speedbench.gate.core import label

    row = {"drafter": "ngram", "num_speculative_tokens": 2, "batch_size": 1, "temperature": 0.0, "category": "coding"}
    assert label({**row, "concurrency": 1}) != label({**row, "concurrency": 4})
    assert label({**row, "concurrency": 4, "request_rate": 2.0}) == "ngram D=2 B=1 C=4 rate=2/s T=0 coding"
    assert label({**row, "concurrency": -1, "request_rate": float("inf")}) == "ngram D=2 B=1 T=0 coding"
