"""What ``speedbench run`` writes once it ends: ``--json`` is strict JSON."""
import json
import math

from speedbench.run import output
from tests.support.sweep_helpers import copy_results


def _strict(text: str):
    """A parser as strict as JSON.parse, Go or serde: bare NaN / Infinity tokens are errors."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def test_run_json_is_strict_json_with_null_for_numbers_that_are_not_finite(tmp_path, capsys):
    root = copy_results(tmp_path / "run")
    assert all(math.isinf(rate) for rate in output.ResultsStore(root).cells().request_rate)  # a closed loop: inf
    out = tmp_path / "summary.json"
    output.report(root, code=0, verdict=None, verdict_ok=True, json_path=str(out))
    data = _strict(out.read_text())
    assert data["n_cells"] == len(data["cells"]) > 0
    assert all(cell["request_rate"] is None for cell in data["cells"])


def test_json_on_stdout_is_strict_too(tmp_path, capsys):
    root = copy_results(tmp_path / "run")
    output.report(root, code=0, verdict=None, verdict_ok=True, json_path="-")
    assert _strict(capsys.readouterr().out)["cells"]


def test_a_resumed_run_prints_the_cells_it_added_and_counts_the_rest(tmp_path, capsys):
    """Before: a resumed sweep reprinted every cell, the new ones not told apart."""
    import os
    import time

    root = copy_results(tmp_path / "run")
    table = output.ResultsStore(root).cells()
    started = time.time()
    new = root / "cells" / f"{table.cell_id.iloc[0]}.json"
    os.utime(new, (started + 1, started + 1))  # written after this invocation started: its cell
    output.report(root, code=0, verdict=None, verdict_ok=True, json_path=None, since=started)
    out = capsys.readouterr().out
    assert f"resumed: 1 cell(s) written by this run (below), {len(table) - 1} kept from before" in out
    rows = out.split("resumed:", 1)[1].splitlines()[2:]  # after the note and the table's header
    assert len([r for r in rows if r.split()[-1:] in (["ok"], ["failed"])]) == 1
    for path in (root / "cells").glob("*.json"):
        os.utime(path, (started - 10, started - 10))
    output.report(root, code=0, verdict=None, verdict_ok=True, json_path=None, since=started)
    assert f"nothing new: all {len(table)} cell(s) were already measured" in capsys.readouterr().out
