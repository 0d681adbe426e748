"""scripts/gate-ci.sh end to end: it gates the CI benchmark against the committed baseline and keeps
the gated run next to the verdict (OUT_DIR/run/ci-default), so CI can upload what it judged."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from speedbench.results import ResultsStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gate_ci_keeps_the_run_it_gated(tmp_path):
    out = tmp_path / "gate-out"
    stale = out / "run" / "ci-default"
    stale.mkdir(parents=True)
    (stale / "stale-marker").write_text("a previous gated run\n")
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gate-ci.sh"), str(out)], capture_output=True, text=True,
                         timeout=900, env=dict(os.environ))
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]  # a verdict (timing decides which)
    run = out / "run" / "ci-default"
    cells = ResultsStore(run).cells()
    assert len(cells) and (cells.status == "ok").all(), (res.returncode, res.stdout[-3000:] + res.stderr[-3000:])
    assert not (run / "stale-marker").exists()  # measured again, not resumed from the last gated run
    gate = json.loads((out / "gate.json").read_text())
    assert Path(gate["current"]).resolve() == run.resolve(), gate.get("current")
    assert (out / "gate-junit.xml").is_file()
