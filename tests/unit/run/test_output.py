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
