"""A schedule on vLLM for real: passed through as num_speculative_tokens_per_batch_size, output lossless."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.results import ResultsStore

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def test_vllm_runs_a_schedule_lossless_and_drafts_at_most_its_k(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), SPEEDBENCH_CACHE=str(tmp_path / "cache"))
    # K=1 at every batch size under a configured cap of 3: no step may draft more than 1
    args = [sys.executable, "-m", "speedbench.cli", "run", "backend=vllm", "target.path=random:tiny-target",
            "drafter=ngram", "drafter.num_speculative_tokens=3", "drafter.schedule=[[1,4096,1]]",
            f"results_dir={tmp_path}", "run_id=v", "max_new_tokens=16", "dataset=mini", "dataset.categories=[math]",
            "dataset.n_requests=2", "batch_size=2", "hydra/job_logging=disabled"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    store = ResultsStore(tmp_path / "v")
    cells = store.cells()
    cells = cells[~cells["derived"].astype(bool)]
    assert len(cells) == 1 and (cells.status == "ok").all(), cells.error.tolist()
    cell = cells.iloc[0]
    assert cell.schedule == "[[1, 4096, 1]]" and cell.greedy_match_rate == 1.0
    steps = store.steps()
    assert len(steps) and steps["drafted"].max() == 1, steps["drafted"].value_counts()
