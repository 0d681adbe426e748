"""``speedbench run backend=vllm`` through the installed console-script form (vLLM spawns workers:
the entry point must survive being re-imported by them), on the default ``random:`` tiny target."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench.results import ResultsStore

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
# what pip writes for [project.scripts] speedbench = "speedbench.cli:main"
CONSOLE_SCRIPT = """\
import sys
from speedbench.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""


def test_speedbench_run_backend_vllm(tmp_path):
    script = tmp_path / "speedbench"
    script.write_text(CONSOLE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO), SPEEDBENCH_CACHE=str(tmp_path / "cache"))
    args = [sys.executable, str(script), "run", "backend=vllm", "target.path=random:tiny-target", "drafter=ngram", f"results_dir={tmp_path}", "run_id=v",
            "max_new_tokens=16", "dataset=mini", "dataset.categories=[math]", "dataset.n_requests=2", "batch_size=2"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    cells = ResultsStore(tmp_path / "v").cells()
    assert len(cells) == 1 and (cells.status == "ok").all(), cells.error.tolist()
    cell = cells.iloc[0]
    assert cell.backend == "vllm" and cell.al_source == "steps" and 1 <= cell.al <= 5
    assert cell.greedy_match_rate == 1.0 and cell.tpot_ms_baseline > 0 and cell.tpot_ms_spec > 0
    assert (tmp_path / "cache" / "random").is_dir()  # the random preset was exported for vLLM
    assert "speedup" in proc.stdout
    # quiet in a log: the engine's profiler tables and per-step lines go to the run folder
    both = proc.stdout + proc.stderr
    assert "Self CPU" not in both and "\r" not in both, both[-3000:]
    # the engines are shut down in order at the end, not found dead or leaking at interpreter exit
    assert "exited unexpectedly" not in both and "leaked shared_memory" not in both, both[-3000:]
    assert len(proc.stdout.splitlines()) < 20 and len(proc.stderr.splitlines()) < 40, both[-3000:]
    # no third-party line that does not concern the user (console.IRRELEVANT; the in-process engine's
    # native start-up notes go to the engine log)
    for line in ("Triton is installed", "NUMA binding", "reduce_op", "Passing raw prompts", "set_num_threads"):
        assert line not in both, both[-3000:]
    assert (tmp_path / "v" / "engine-logs" / "vllm.log").stat().st_size > 0
