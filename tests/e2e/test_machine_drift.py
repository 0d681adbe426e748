"""scripts/machine_drift.py: the draft/target step-time ratio per window, on the shipped models."""
import importlib.util
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("machine_drift", REPO / "scripts" / "machine_drift.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_windows_pool_rows_by_time():
    drift = _script()
    rows = [(0.1, 0.002, 0.001), (0.9, 0.002, 0.004), (1.2, 0.003, 0.003)]  # (t, target s, draft s)
    first, second = drift.windows(rows, 1.0)
    assert first[0] == pytest.approx(math.sqrt(0.5 * 2.0)) and first[1] == pytest.approx(2.0)
    assert second == pytest.approx((1.0, 3.0, 3.0))


def test_probe_runs_on_the_shipped_models_and_refuses_bad_options(capsys):
    drift = _script()
    assert drift.main(["--seconds", "2", "--window", "1", "--reps", "20"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.strip().endswith(tuple("0123456789")) and ln.strip()[0].isdigit()]
    assert len(lines) >= 2  # a row per window: start, ratio, target ms, draft ms
    for ln in lines:
        _, ratio, target_ms, draft_ms = ln.split()
        assert float(ratio) == pytest.approx(float(draft_ms) / float(target_ms), rel=0.5) and float(target_ms) > 0
    assert "ratio across windows" in out
    with pytest.raises(SystemExit) as bad:
        drift.main(["--seconds", "0"])
    assert bad.value.code == 2
