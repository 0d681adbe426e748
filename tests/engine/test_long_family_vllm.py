"""The long-context family on vLLM (CPU) for real: the shipped target and its draft load with their
40,960 positions and run an 8k-token prompt with the reference engine's acceptance, losslessly."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.results import ResultsStore

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def test_vllm_and_the_reference_engine_agree_on_the_long_pair_at_8k(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), SPEEDBENCH_CACHE=str(tmp_path / "cache"))
    args = [sys.executable, "-m", "speedbench.cli", "run", "-m", "backend=torch,vllm", "target=tiny_long",
            "drafter=tiny_long_draft", "dataset=throughput_8k", "dataset.tier=low", "dataset.n_requests=1",
            "max_new_tokens=24", f"results_dir={tmp_path}", "run_id=long", "hydra/job_logging=disabled"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    store = ResultsStore(tmp_path / "long")
    cells = store.cells()
    cells = cells[~cells["derived"].astype(bool)]
    assert sorted(cells.backend) == ["torch", "vllm"] and (cells.status == "ok").all(), cells.error.tolist()
    assert (cells.greedy_match_rate == 1.0).all()
    assert cells.al.iloc[0] == cells.al.iloc[1] > 1.0  # the same accepted tokens on both engines
    steps = store.steps()
    assert steps["context_len"].min() >= 8000  # every step ran with the 8k prompt in its context
