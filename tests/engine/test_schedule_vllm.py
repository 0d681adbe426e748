"""A schedule on vLLM for real: passed through as num_speculative_tokens_per_batch_size, output lossless."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.results import ResultsStore

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def test_vllm_runs_a_schedule_lossless_and_switches_k_at_its_threshold(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), SPEEDBENCH_CACHE=str(tmp_path / "cache"))
    # K=3 for a batch of 1, K=1 from 2 up, under a cap of 3; 3 requests in batches of 2: blocks of 2 and 1
    args = [sys.executable, "-m", "speedbench.cli", "run", "backend=vllm", "target.path=random:tiny-target",
            "drafter=ngram", "drafter.num_speculative_tokens=3", "drafter.schedule=[[1,1,3],[2,4096,1]]",
            f"results_dir={tmp_path}", "run_id=v", "max_new_tokens=16", "dataset=mini", "dataset.categories=[math]",
            "dataset.n_requests=3", "batch_size=2", "hydra/job_logging=disabled"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    store = ResultsStore(tmp_path / "v")
    cells = store.cells()
    cells = cells[~cells["derived"].astype(bool)]
    assert len(cells) == 1 and (cells.status == "ok").all(), cells.error.tolist()
    cell = cells.iloc[0]
    assert cell.schedule == "[[1, 1, 3], [2, 4096, 1]]" and cell.greedy_match_rate == 1.0
    steps = store.steps()
    spec = steps[steps["role"] == "spec"]
    deepest = spec.groupby("request_id")["drafted"].max().sort_values()
    # the two requests batched together never draft more than the K of 2 in flight; the one alone drafts 3
    assert deepest.tolist() == [1, 1, 3], spec.groupby("request_id")["drafted"].apply(list)
