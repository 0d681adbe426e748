"""scripts/default_reruns.py: reruns in fresh processes and the reproducibility figures it prints."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_reruns_report_cv_spread_coverage_and_stable_share(tmp_path):
    out = tmp_path / "reruns"
    cmd = [sys.executable, str(REPO / "scripts" / "default_reruns.py"), "--reruns", "2", "--out", str(out),
           "--json", str(tmp_path / "f.json"), "--", "dataset=mini", "drafter=ngram", "max_new_tokens=8", "protocol.max_repeats=2"]  # the real engine: real timings differ per rerun
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    f = json.loads((tmp_path / "f.json").read_text())
    assert f["reruns"] == 2 and f["cells"] == 3 and len(f["wall_s"]) == 2
    assert 0 < f["cv_median"] <= f["cv_max"] and len(f["geomean"]) == 2 and f["geomean"][0] != f["geomean"][1]
    assert 0 <= f["coverage"] <= 1 and f["coverage_pairs"] == 6
    assert "per-cell CV of the speedup: median" in proc.stdout and "interval coverage" in proc.stdout
    again = subprocess.run([sys.executable, str(REPO / "scripts" / "default_reruns.py"), "--reuse", str(out)],
                           capture_output=True, text=True, timeout=120)  # the same figures from the folders
    assert again.returncode == 0 and again.stdout.splitlines()[1] == proc.stdout.splitlines()[1]
