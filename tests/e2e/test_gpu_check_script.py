"""scripts/gpu-check.sh --dry-run: the prepared GPU check runs end to end on a CPU at tiny sizes.

Every step of the script (three microbenchmarks, the reference engine's default pair with the
split, the report over both) runs here, so the script cannot rot between GPU sessions.
"""
import os
import subprocess
import sys
from pathlib import Path

from speedbench.results import ResultsStore

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_writes_a_results_folder_the_report_renders(tmp_path):
    out = tmp_path / "gc"
    env = dict(os.environ, PYTHON=sys.executable)
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for kind in ("gemm", "attention", "verify"):
        assert (out / "microbench" / f"{kind}.parquet").is_file(), kind
    cells = ResultsStore(out / "runs" / "gpu-check").cells()
    assert len(cells) >= 1 and (cells["status"] == "ok").all()
    assert (cells["timing_source"] == "reference-loop-synced-clock").all() and (cells["t_verify_ms"] > 0).all()
    report = (out / "report" / "report.md").read_text()
    assert "G1" in report and "FAILED" not in res.stdout
