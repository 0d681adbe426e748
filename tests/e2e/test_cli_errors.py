"""CI-friendly output and one-line usage errors (exit 2), end to end through the real CLI."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speedbench.cli import build_parser
from speedbench.run.argv import split_run_argv
from speedbench.results import ResultsStore
from speedbench.results.store import atomic_write_text

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speedbench.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env=_env(**env))


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-3000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_piped_sweep_has_no_control_codes_one_table_and_one_verdict(tmp_path):
    # -m between the overrides, as users type it; two jobs in one invocation
    proc = cli(tmp_path, "run", f"results_dir={tmp_path}", "drafter=ngram", "-m", "drafter.num_speculative_tokens=2,4",
               "dataset=smoke", "dataset.categories=[coding]", "max_new_tokens=8", "run_id=piped", "--json", "out.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    both = proc.stdout + proc.stderr
    assert "\r" not in both and "\x1b[" not in both  # no progress bars, no cursor movement
    picks = [ln for ln in proc.stdout.splitlines() if ln.startswith(("pick: ", "undecided: ", "nothing beats plain"))]
    table = "\n".join(ln for ln in proc.stdout.splitlines() if ln not in picks)
    assert table.count("results: ") == 1 and table.count("speedup") == 1  # one table per invocation
    assert len(picks) == 1 and proc.stdout.strip().endswith(picks[0])  # and one pick (one B), last
    assert both.count("cells failed") == 1  # the sweep verdict, once
    assert "INFO httpx" not in both
    summary = json.loads((tmp_path / "out.json").read_text())
    assert summary["results"] == str((tmp_path / "piped").resolve()) and summary["exit_code"] == 0
    assert sorted(c["num_speculative_tokens"] for c in summary["cells"]) == [2, 4]
    assert os.readlink(tmp_path / "latest") == "piped"
    for path in [tmp_path / "piped" / "cells.csv", *(tmp_path / "piped" / "cells").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path  # readable by teammates under umask 022


def test_synthetic_runs_say_nothing_ran_and_json_to_stdout(tmp_path):
    proc = cli(tmp_path, "run", f"results_dir={tmp_path}", "backend=synthetic", "dataset=smoke", "run_id=syn", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)  # stdout is the JSON alone; the table went to stderr
    assert data["synthetic"] is True and data["n_cells"] == 12 and data["n_failed"] == 0
    assert "no model was run" in proc.stderr


def test_progress_bars_only_when_asked(monkeypatch):
    from speedbench.console import progress_enabled

    class Pipe:
        def isatty(self):
            return False

    class Tty:
        def isatty(self):
            return True

    for var in ("SPEEDBENCH_PROGRESS", "TQDM_DISABLE", "CI", "TERM"):
        monkeypatch.delenv(var, raising=False)
    assert not progress_enabled("auto", Pipe()) and progress_enabled("auto", Tty())
    assert progress_enabled("true", Pipe()) and not progress_enabled(False, Tty())
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert not progress_enabled("auto", Tty())
    monkeypatch.setenv("SPEEDBENCH_PROGRESS", "1")
    assert progress_enabled("auto", Pipe())


def test_minus_m_and_hydra_flags_anywhere():
    argv, own = split_run_argv(["drafter=ngram", "-m", "run_id=x", "--config-dir", "mine", "--json", "o.json", "b=1"])
    assert argv == ["-m", "--config-dir", "mine", "drafter=ngram", "run_id=x", "b=1"] and own.json == "o.json"


def test_run_errors_are_one_line(tmp_path):
    assert "num_speculativ_tokens" in one_line_error(cli(tmp_path, "run", "drafter.num_speculativ_tokens=3"))
    assert "--bogus" in one_line_error(cli(tmp_path, "run", "--bogus"))
    assert "--json" in one_line_error(cli(tmp_path, "run", "--json"))
    assert "batch_size" in one_line_error(cli(tmp_path, "run", f"results_dir={tmp_path}", "batch_size=0"))
    line = one_line_error(cli(tmp_path, "run", f"results_dir={tmp_path}", "dataset=throughput_8k", "dataset.tier=medium"))
    assert "dataset.tier='medium'" in line and "low, mixed, high, all" in line
    assert not any(tmp_path.glob("*/cells"))


def test_a_misspelt_model_shape_is_refused_at_once(tmp_path):
    start = time.monotonic()
    line = one_line_error(cli(tmp_path, "plan", "--model-shape", "llama-3.1-8bb"))
    assert time.monotonic() - start < 30  # no hub retries
    assert "did you mean 'llama-3.1-8b'" in line
    assert "--model-shape llama-3.1-8b" in one_line_error(cli(tmp_path, "plan", "--config", "llama-3.1-8bb"))


def test_missing_models_and_devices_are_one_line(tmp_path):
    assert "builtin:nope" in one_line_error(cli(tmp_path, "plan", "--config", "builtin:nope"))
    assert "random preset" in one_line_error(cli(tmp_path, "plan", "--model-shape", "random:nope"))
    import torch

    if not torch.cuda.is_available():
        line = one_line_error(cli(tmp_path, "microbench", "gemm", "--device", "cuda", "--results-dir", str(tmp_path / "mb")))
        assert "CUDA is not available" in line


def test_builtin_and_random_tokenizers_everywhere(tmp_path):
    out = tmp_path / "splits"
    proc = cli(tmp_path, "data", "build", "--tokenizer", "builtin:tiny-target", "--sizes", "1k", "--n-per-tier", "1", "--out-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["tokenizer"] == "tiny-target"
    for tok in ("builtin:tiny-target", "random:tiny-target"):
        proc = cli(tmp_path, "data", "validate", "smoke.jsonl", "--tokenizer", tok, "--max-prompt-tokens", "4096")
        assert proc.returncode == 0 and "OK (11 records)" in proc.stdout, proc.stderr[-2000:]
    proc = cli(tmp_path, "data", "validate", "smoke.jsonl", "--tokenizer", "random:tiny-target", "--max-prompt-tokens", "3")
    assert proc.returncode == 1 and "over the prompt-token limit of 3" in proc.stdout


def test_plan_into_a_closed_pipe_is_not_a_traceback(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "speedbench.cli", "plan", "--model-shape", "llama-3.1-8b"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_env())
    proc.stdout.close()  # like `| head` that has already exited
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_validate_reads_files_as_run_does(tmp_path):
    spec_bench = tmp_path / "question.jsonl"
    spec_bench.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question_id": 81, "category": "writing", "turns": ["Write a haiku."]},
        {"question_id": 161, "category": "translation", "turns": ["Translate: bonjour"]},
        {"question_id": 201, "category": "math_reasoning", "turns": ["2+2?"]},
    ]))
    plain = cli(tmp_path, "data", "validate", str(spec_bench))
    assert plain.returncode == 1 and "translation" in plain.stdout  # not a SPEED-Bench category
    proc = cli(tmp_path, "data", "validate", "--source", "spec_bench", str(spec_bench))
    assert proc.returncode == 0 and "OK (3 records)" in proc.stdout, proc.stdout
    generic = tmp_path / "mine.jsonl"
    generic.write_text(json.dumps({"prompt": "hello"}) + "\n" + json.dumps({"prompt": ""}) + "\n")
    proc = cli(tmp_path, "data", "validate", "--source", "generic", "--column", "prompt=turns", str(generic))
    assert proc.returncode == 1 and "prompt[0] (mapped to turns[0])" in proc.stdout and "1 problem(s)" in proc.stdout
    assert "unknown --source" in one_line_error(cli(tmp_path, "data", "validate", "--source", "nope", str(generic)))
    # the shipped folder, manifest of the built splits included, validates clean
    proc = cli(tmp_path, "data", "validate", str(REPO / "datasets"))
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout


def test_fixtures_train_takes_its_options():
    args = build_parser().parse_args(["fixtures", "train", "--out", "somewhere", "--quick"])
    assert str(args.out) == "somewhere" and args.quick


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_results_files_follow_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        ResultsStore(tmp_path / "run").write_provenance({"x": 1})
    finally:
        os.umask(old)
    for path in (tmp_path / "a.json", tmp_path / "run" / "provenance.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_wandb_offline_runs_are_pointed_at(tmp_path):
    proc = cli(tmp_path, "run", f"results_dir={tmp_path}", "backend=synthetic", "logger=wandb", "dataset=smoke",
               "dataset.categories=[coding]", "run_id=wb", WANDB_SILENT="true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = tmp_path / "wb" / "wandb"
    assert f"W&B offline runs: {where}" in proc.stdout
    assert list(where.glob("offline-run-*")), list(where.iterdir())


def test_a_refused_run_still_writes_its_json(tmp_path):
    """Scripts read --json whatever happened: a run refused before anything ran says why, exit 2."""
    line = one_line_error(cli(tmp_path, "run", "sampling.temperature=-1", "--json", "out.json", f"results_dir={tmp_path / 'r'}"))
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["exit_code"] == 2 and data["cells"] == [] and data["results"] is None
    assert data["error"] in line and "sampling.temperature" in data["error"]
    proc = cli(tmp_path, "run", "dataset=nope", "--json", "-")
    assert proc.returncode == 2 and json.loads(proc.stdout)["exit_code"] == 2  # stdout: the JSON alone
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*"))  # nothing written


def test_a_truncated_target_is_one_line_naming_the_file_and_keeps_what_was_measured(tmp_path):
    """A half-finished copy of the target's model.safetensors is refused before any model loads (issue 54
    item 3: it ended in a SafetensorError traceback, exit 1, no --json summary): one line naming the file,
    exit 2, the summary written, the cells already in the run folder kept."""
    import shutil

    from speedbench.models import resolve_path

    target = tmp_path / "half-target"
    shutil.copytree(resolve_path("builtin:tiny-target"), target)
    weights = target / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    results = tmp_path / "r"
    measured = cli(tmp_path, "run", f"results_dir={results}", "run_id=keep", "backend=synthetic", "dataset=smoke",
                   "dataset.categories=[coding]")
    assert measured.returncode == 0, measured.stderr[-2000:]
    before = sorted(p.name for p in (results / "keep" / "cells").iterdir())
    line = one_line_error(cli(tmp_path, "run", f"results_dir={results}", "run_id=keep", "backend=torch",
                              f"target.path={target}", "drafter=tiny_draft", "dataset=smoke", "dataset.categories=[coding]",
                              "max_new_tokens=8", "--json", "out.json"))
    assert str(weights) in line and "safetensors" in line
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["exit_code"] == 2 and str(weights) in data["error"]
    assert sorted(p.name for p in (results / "keep" / "cells").iterdir()) == before  # nothing measured lost


def _refusal(capsys, *args: str) -> list[str]:
    from speedbench.cli import main

    assert main(["run", "--check", *args]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and 1 <= len(lines) <= 2, err
    return lines


def test_config_errors_keep_the_help_hydra_has(tmp_path, capsys):
    # a group option: the short line with a did-you-mean, then the group's options (no internal schemas)
    first, options = _refusal(capsys, "drafter=tiny_draft_smal")
    assert "drafter=tiny_draft_smal" in first and "did you mean drafter=tiny_draft_small?" in first, first
    assert options.strip().startswith("drafter options:") and "ngram" in options and "schema_" not in options, options
    first, options = _refusal(capsys, "+experiment=ci_gat")
    assert "did you mean +experiment=ci_gate?" in first and "tiny_ngram" in options, first
    first, options = _refusal(capsys, "dataset=nope")  # nothing close: no guess, the options all the same
    assert "did you mean" not in first and "smoke" in options and "dataset_schema" not in options
    # an unknown key: the schema's closest key, on one line (overridden or appended)
    for arg in ("protocol.budgett_s=5", "+protocol.budgett_s=5"):
        (line,) = _refusal(capsys, arg)
        assert "protocol.budgett_s" in line and "did you mean budget_s?" in line, line
    (line,) = _refusal(capsys, "protocol.zzzz=1")  # nothing close: the keys it has
    assert "its keys:" in line and "budget_s" in line and "min_repeats" in line, line
    # a wrong type: the type expected
    (line,) = _refusal(capsys, "batch_size=four")
    assert line.endswith("batch_size: expected an integer, got 'four'"), line
    (line,) = _refusal(capsys, "sampling.temperature=hot")
    assert "sampling.temperature: expected a number" in line, line


def test_a_sweep_names_the_job_and_the_option_on_one_line(tmp_path, capsys):
    (line,) = _refusal(capsys, "-m", "drafter=ngram,tiny_draft_smal", f"results_dir={tmp_path}")
    assert "job #1" in line and "did you mean drafter=tiny_draft_small?" in line and "drafter options:" in line, line


def test_run_help_hides_the_internal_schemas(tmp_path):
    proc = cli(tmp_path, "run", "--help")
    assert proc.returncode == 0, proc.stderr
    groups = proc.stdout.split("== Config ==")[0]
    assert "drafter: " in groups and "tiny_draft_small" in groups and "backend: " in groups
    assert "schema_" not in groups and "_schema" not in groups, groups


def test_a_piped_run_beats_its_heart_and_ends_with_the_reports_pick(tmp_path):
    # one prompt, one cell; piped (not a terminal): no bars, a heartbeat line every 0.2 s instead
    proc = cli(tmp_path, "run", "dataset=smoke", "dataset.categories=[coding]", "dataset.n_requests=1", "max_new_tokens=8",
               f"results_dir={tmp_path / 'r'}", "run_id=one", SPEEDBENCH_HEARTBEAT_S="0.2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    beats = [ln for ln in proc.stderr.splitlines() if ln.startswith("speedbench run: [")]
    # each beat names the phase under way; the engine start of these tiny models can end before the first beat
    phases = ("starting the engine (backend=torch", "warm-up (excluded from every metric)", "measuring tiny_draft_small D=4 B=1 coding")
    assert beats and all(any(p in ln for p in phases) for ln in beats), beats
    assert any(phases[2] in ln for ln in beats), beats
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(("pick: ", "nothing beats plain decoding (best: ", "undecided: ")) and "on smoke" in last, last
    from speedbench.report.pick import pick_lines  # the line restates the report's own pick

    assert pick_lines(tmp_path / "r" / "one") == [last]
    cell = ResultsStore(tmp_path / "r" / "one").cells().iloc[0]
    assert f"{cell['speedup']:.2f}" in last and "tiny_draft_small D=4" in last
    reported = main_report_pick(tmp_path / "r" / "one")
    assert reported.startswith("none (plain") if last.startswith("nothing beats") else reported in last, (reported, last)
    # off: no heartbeat lines
    quiet = cli(tmp_path, "run", "dataset=smoke", "dataset.categories=[coding]", "dataset.n_requests=1", "max_new_tokens=8",
                f"results_dir={tmp_path / 'r'}", "run_id=two", SPEEDBENCH_HEARTBEAT_S="0")
    assert quiet.returncode == 0 and not any(ln.startswith("speedbench run: [") for ln in quiet.stderr.splitlines())


def main_report_pick(root: Path) -> str:
    """The pick cell of the report's *What to pick* table (report.md), as written by speedbench report."""
    from speedbench.cli import main

    assert main(["report", str(root)]) == 0
    text = (root / "report" / "report.md").read_text()
    table = text.split("### What to pick", 1)[1]
    row = next(ln for ln in table.splitlines() if ln.startswith("| 1 |"))
    return row.split("|")[2].strip()
