"""The gate cannot be disarmed (issue #15): nothing gated is its own verdict, unreadable inputs exit 2."""
import json

import pytest

from tests.support.sweep_helpers import copy_results, shared_results
from tests.unit.gate.test_gate import gate, slow_down_spec

STRICT = "al: {tolerance: 0.01}\nspeedup: {tolerance: 0.15}\nmin_requests: 1000\n"


def test_a_12x_slowdown_with_every_cell_below_min_requests_is_not_a_pass(tmp_path, capsys):
    current = copy_results(tmp_path / "current")
    slow_down_spec(current, 12.0)
    conf = tmp_path / "gate.yaml"
    conf.write_text(STRICT)
    rc = gate(shared_results(), current, "--config", str(conf), "--json", str(tmp_path / "g.json"),
              "--junit", str(tmp_path / "g.xml"))
    assert rc == 4
    assert "NOTHING GATED" in capsys.readouterr().out
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["verdict"] == "nothing-gated" and out["exit_code"] == 4
    assert {c["verdict"] for c in out["checks"]} == {"insufficient"}
    assert 'type="nothing-gated"' in (tmp_path / "g.xml").read_text()


def test_nothing_gated_passes_only_when_the_user_opts_in(tmp_path):
    base = shared_results()
    conf = tmp_path / "gate.yaml"
    conf.write_text(STRICT)
    assert gate(base, base, "--config", str(conf)) == 4
    assert gate(base, base, "--config", str(conf), "--allow-nothing-gated", "--json", str(tmp_path / "g.json")) == 0
    assert json.loads((tmp_path / "g.json").read_text())["verdict"] == "pass-nothing-gated"
    conf.write_text(STRICT + "allow_nothing_gated: true\n")
    assert gate(base, base, "--config", str(conf)) == 0
    conf.write_text(STRICT + "allow_nothing_gated: 'yes'\n")
    assert gate(base, base, "--config", str(conf)) == 2


@pytest.mark.parametrize("damage", ["truncated", "not-json", "missing-metric", "wrong-type"])
def test_a_corrupted_cell_file_exits_2_naming_it(tmp_path, capsys, damage):
    current = copy_results(tmp_path / "current")
    cell = sorted((current / "cells").glob("*.json"))[0]
    text = cell.read_text()
    row = json.loads(text)
    if damage == "truncated":
        cell.write_text(text[: len(text) // 2])
    elif damage == "not-json":
        cell.write_bytes(b"\xff\xfe garbage")
    elif damage == "missing-metric":
        cell.write_text(json.dumps({k: v for k, v in row.items() if k != "speedup"}))
    else:
        cell.write_text(json.dumps(row | {"al": "high"}))
    assert gate(shared_results(), current) == 2
    err = capsys.readouterr().err
    assert cell.name in err and "Traceback" not in err


def test_a_corrupted_request_table_exits_2_naming_it(tmp_path, capsys):
    current = copy_results(tmp_path / "current")
    table = sorted((current / "requests").glob("*.parquet"))[0]
    table.write_bytes(table.read_bytes()[:100])
    assert gate(shared_results(), current) == 2
    assert table.name in capsys.readouterr().err


@pytest.mark.parametrize("base_speedup", [0.0, -1.0])
def test_a_ratio_that_is_not_a_number_fails_naming_the_cell(tmp_path, capsys, base_speedup):
    """A baseline speedup of 0 or below makes current / baseline NaN: a collapse to 0.01 must fail, not PASS."""
    base, current = copy_results(tmp_path / "base"), copy_results(tmp_path / "current")
    for folder in (base, current):  # only the cell rows: the gate's point comparison
        for part in ("requests", "steps"):
            for path in (folder / part).glob("*.parquet"):
                path.unlink()
    cells = sorted(p for p in (base / "cells").glob("*.json") if not json.loads(p.read_text()).get("derived"))
    for path in cells:
        path.write_text(json.dumps(json.loads(path.read_text()) | {"speedup": base_speedup}))
        cur = current / "cells" / path.name
        cur.write_text(json.dumps(json.loads(cur.read_text()) | {"speedup": 0.01}))
    rc = gate(base, current, "--config", "ci", "--json", str(tmp_path / "g.json"))
    printed = capsys.readouterr().out
    assert rc == 1 and "PASS" not in printed, printed
    checks = [c for c in json.loads((tmp_path / "g.json").read_text())["checks"] if c["metric"] == "speedup"]
    assert {c["cell_id"] for c in checks if c["verdict"] == "failed"} == {p.stem for p in cells}
    assert all("not a finite number" in c["note"] for c in checks if c["cell_id"] != "ALL")
