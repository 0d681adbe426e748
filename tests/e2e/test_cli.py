"""The CLI end to end on the embedded default, in a temporary folder."""
import json
import os
import subprocess
import sys


from speedbench.cli import main
from speedbench.results import ResultsStore

FAST = ["max_new_tokens=12", "dataset=smoke", "dataset.categories=[coding,math]"]


def speedbench(tmp_path, *args, env=None):
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"results_dir={tmp_path}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)


def test_default_run_writes_the_results_store(tmp_path):
    env = dict(os.environ, OPENAI_API_KEY="sk-test-secret-0123456789", HF_TOKEN="hf_secrettoken0123456789")
    proc = speedbench(tmp_path, "run_id=default", "max_new_tokens=16", "+drafter.engine_args.api_key=sk-abcdefghijklmnop", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = ResultsStore(tmp_path / "default")
    cells = store.cells()
    assert len(set(cells.category) - {"all"}) == 11  # the default samples all 11 categories
    assert cells[cells.category == "all"].derived.all()  # and the derived overall row beside them
    assert (cells.status == "ok").all()
    assert (cells.greedy_match_rate == 1.0).all()  # greedy speculation is lossless
    assert ((cells.al >= 1) & (cells.al <= 1 + cells.num_speculative_tokens)).all()
    for col in ("speedup", "speedup_predicted", "tpot_ms_baseline", "t_verify_ms"):
        assert cells[col].gt(0).all(), col
    for name in ("cells.parquet", "cells.csv", "cells.jsonl", "provenance.json"):
        assert (store.root / name).exists(), name
    req = store.requests()
    assert set(req.role) == {"baseline", "spec"}
    assert store.steps().groupby("role").size().min() > 0
    prov_text = (store.root / "provenance.json").read_text()
    assert "sk-abcdefghijklmnop" not in prov_text and "sk-test-secret" not in prov_text and "hf_secret" not in prov_text
    prov = json.loads(prov_text)
    assert prov["packages"]["torch"] and prov["config"]["seed"] == 0
    assert "results:" in proc.stdout and "speedup" in proc.stdout  # the summary table


def test_multirun_grid_and_resume(tmp_path):
    grid = ["run_id=grid", "drafter=ngram", "drafter.num_speculative_tokens=2,4,6", "batch_size=1,4",
            "dataset=smoke", "dataset.categories=[coding]", "max_new_tokens=8", "-m"]
    proc = speedbench(tmp_path, *grid)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = ResultsStore(tmp_path / "grid").cells()
    assert len(cells) == 6
    assert sorted(zip(cells.num_speculative_tokens, cells.batch_size)) == [(d, b) for d in (2, 4, 6) for b in (1, 4)]
    assert cells.cell_id.is_unique
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "grid" / "cells").iterdir()}
    again = speedbench(tmp_path, *grid)
    assert again.returncode == 0
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "grid" / "cells").iterdir()}
    assert before == after  # every finished cell skipped, none duplicated
    assert "nothing new: all 6 cell(s) were already measured" in again.stdout


def test_a_broken_cell_is_recorded_and_fails_the_run(tmp_path):
    from tests.support.sweep_helpers import broken_model_dir

    broken = broken_model_dir(tmp_path)  # valid config, garbage weights: fails only when it loads
    proc = speedbench(tmp_path, "run_id=broken", "drafter=tiny_draft", f"drafter.model={broken}", *FAST)
    assert proc.returncode == 1, proc.stderr[-2000:]
    cells = ResultsStore(tmp_path / "broken").cells()
    assert len(cells) == 2 and (cells.status == "failed").all()
    assert (cells.error.str.len() > 0).all()


def test_a_drafter_that_does_not_exist_is_refused_before_running(tmp_path):
    proc = speedbench(tmp_path, "run_id=missing", "drafter=tiny_draft", "drafter.model=random:no-such-preset", *FAST)
    assert proc.returncode == 2 and "no-such-preset" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "missing" / "cells").exists()


def test_bad_option_is_refused_before_running(tmp_path):
    proc = speedbench(tmp_path, "drafter.num_speculativ_tokens=3")
    assert proc.returncode != 0
    assert "num_speculativ_tokens" in proc.stderr
    assert not any(tmp_path.glob("*/cells"))


def test_help_lists_subcommands(capsys):
    assert main([]) == 0
    assert "run" in capsys.readouterr().out
