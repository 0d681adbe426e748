"""Every bad input is refused before a model loads (issue #15): exit 2, the key or file:line named,
no traceback, nothing written. Also the run folder's confinement, lock and writability."""
import json
import os
import subprocess
import sys

import pytest

from speedbench.pipeline import runner, validation
from speedbench.results import runlock
from speedbench.results import ResultsStore

from tests.support.sweep_helpers import make_run, subprocess_env

# a target that does not exist as weights: refusing before any model loads means never needing them
FAST = ["dataset=smoke", "dataset.categories=[coding,math]", "max_new_tokens=8", "hydra/job_logging=disabled"]


def speedbench(tmp_path, *args, timeout=300):
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"results_dir={tmp_path / 'results'}", "run_id=v", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=timeout, env=subprocess_env())


def refused(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr, proc.stderr[-2000:]
    for w in words:
        assert w in proc.stderr, (w, proc.stderr[-2000:])


def wrote_nothing(tmp_path):
    results = tmp_path / "results"
    return not results.exists() or not any(results.rglob("*"))


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (["sampling.temperature=-1", "sampling.top_p=2"], ["sampling.temperature", "sampling.top_p"]),
    (["drafter=layer_skip", "drafter.num_layers=9"], ["drafter.num_layers=9", "4 layers"]),
    (["drafter=tiny_draft", "drafter.model=builtin:tiny-target", "target.path=random:tiny-target"], ["vocab_size"]),
    (["drafter.method=no_such_method"], ["drafter.method='no_such_method'", "backend=torch"]),
    (["faults.delay_ms=-5"], ["faults.delay_ms"]),
    (["protocol.process_noise=-0.01"], ["protocol.process_noise"]),
    (["protocol.cell_order=shuffled"], ["protocol.cell_order", "rounds, cells"]),
    (["dataset.on_too_long=sometimes"], ["dataset.on_too_long"]),
    (["drafter.num_speculativ_tokens=3"], ["num_speculativ_tokens"]),
    (["run_id=../../escape"], ["run_id="]),
    (["backend.impl=banana"], ["backend.impl"]),  # engine settings: checked without building the engine
    (["backend=hf", "batch_size=4"], ["batch_size=4", "backend=hf"]),
    (["backend=hf", "load.concurrency=4"], ["load.concurrency=4", "backend=hf"]),  # ran C=1, recorded C=4 before
    (["backend=openai", "target.path=random:tiny-target", "backend.options.base_url=http://127.0.0.1:9/v1",
      "backend.options.baseline_url=http://127.0.0.1:8/v1", "backend.options.timeout_s=-1"], ["backend.options.timeout_s"]),
    (["backend=openai", "target.path=random:tiny-target", "backend.options.base_url=http://127.0.0.1:9/v1",
      "backend.options.baseline_url=http://127.0.0.1:8/v1", "backend.options.request_rate=4"],
     ["backend.options.request_rate=4.0", "load.request_rate"]),  # the one rate setting: the old key ran before
    pytest.param(["backend.device=cuda"], ["backend.device"],
                 marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")),
    (["+sampling.temprature=0.5"], ["sampling.temprature"]),
    (["+faults.foo=1"], ["faults.foo"]),
])
def test_bad_settings_exit_2_naming_the_key_and_write_nothing(tmp_path, args, words):
    proc = speedbench(tmp_path, *FAST, *args)
    refused(proc, *words)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 or (lines[0].endswith("problem(s)):") and len(lines) == 1 + len(words)), proc.stderr  # a line each
    assert wrote_nothing(tmp_path), list((tmp_path / "results").rglob("*"))
    assert not (tmp_path.parent / "escape").exists()


def test_a_prompt_over_the_context_is_refused_with_file_and_line(tmp_path):
    prompts = tmp_path / "p.jsonl"
    long_text = "word " * 600  # > 256 byte tokens - 8 new tokens - D 4 - 1
    prompts.write_text(json.dumps({"question_id": "a", "category": "coding", "turns": ["short"]}) + "\n"
                       + json.dumps({"question_id": "b", "category": "coding", "turns": [long_text]}) + "\n")
    run = make_run(tmp_path / "results", "ctx", categories=("coding",), max_new_tokens=8)
    run.dataset.path, run.dataset.n_requests = str(prompts), None
    limit_run = lambda mode: _with(run, mode)  # noqa: E731
    with pytest.raises(validation.ConfigError, match=rf"{prompts}:2: turns: request 'b'"):
        validation.prepare(limit_run("error"))
    skip = validation.prepare(limit_run("skip"))
    assert [r.request_id for r in skip.requests] == ["a"] and set(skip.skipped) == {"b"}
    cut = validation.prepare(limit_run("truncate"))
    assert [r.request_id for r in cut.requests] == ["a", "b"] and set(cut.truncated) == {"b"}
    from speedbench.models import load_tokenizer

    tok = load_tokenizer("random:tiny-target")
    assert validation.prompt_tokens(tok, cut.requests[1].turns, 8) <= cut.limit
    assert not (tmp_path / "results" / "ctx").exists()


def _with(run, mode, max_prompt_tokens=200):
    import copy

    r = copy.deepcopy(run)
    r.dataset.on_too_long, r.dataset.max_prompt_tokens = mode, max_prompt_tokens
    return r


def test_the_default_limit_counts_the_chat_template_and_the_generation(tmp_path):
    run = make_run(tmp_path, "x", categories=("coding",), max_new_tokens=4000)
    with pytest.raises(validation.ConfigError, match="context of 4096|over the limit of 91"):
        validation.prepare(run)  # 4096 - 4000 - D 4 - 1 = 91 tokens of room: the shipped prompts are longer


def test_skipped_prompts_are_recorded_per_cell(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": f"q{i}", "category": "coding", "turns": ["x " * (20 + 200 * i)]}) + "\n"
                               for i in range(3)))
    run = make_run(tmp_path / "results", "skip", categories=("coding",), max_new_tokens=4)
    run.dataset.path, run.dataset.n_requests = str(prompts), None
    run.dataset.on_too_long, run.dataset.max_prompt_tokens = "skip", 120
    run.backend.name, run.batch_size, run.warmup_batches = "synthetic", 4, 0
    (cell,) = runner.run_cells(run, progress=False)
    assert cell.extra["on_too_long"] == "skip" and cell.extra["prompts_skipped"] == 2
    assert cell.batch_size_run == 1 and "batch_size=4" in cell.extra["batch_size_note"]
    row = ResultsStore(tmp_path / "results" / "skip").cells().iloc[0]
    assert row.max_new_tokens == 4 and row.ignore_eos == False and row.batch_size_run == 1  # noqa: E712


@pytest.mark.parametrize("run_id", ["../escape", "/abs/path", "a/b", "..", ""])
def test_run_ids_outside_results_dir_are_refused(tmp_path, run_id):
    with pytest.raises(validation.ConfigError, match="run_id"):
        runlock.run_folder(str(tmp_path), run_id)
    run = make_run(tmp_path / "results", run_id)
    run.backend.name = "synthetic"
    with pytest.raises(validation.ConfigError):
        runner.run_cells(run, progress=False)
    assert not any(tmp_path.parent.glob("escape"))


def test_an_unwritable_results_folder_is_refused_before_measuring(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere: use a path under a file instead
        blocker = tmp_path / "file"
        blocker.write_text("x")
        results = blocker / "results"
    else:
        results = tmp_path / "ro"
        results.mkdir()
        results.chmod(0o500)
    run = make_run(results, "w")
    run.backend.name = "synthetic"
    with pytest.raises(validation.ConfigError, match="not writable"):
        runner.run_cells(run, progress=False)


def test_a_second_process_on_the_same_cells_is_refused(tmp_path):
    run = make_run(tmp_path / "results", "locked", categories=("coding",))
    run.backend.name = "synthetic"
    from speedbench.pipeline.cells import CellKey

    prepared = validation.prepare(run)
    cid = CellKey.for_run(run, "coding", "", prepared.requests).cell_id  # the id carries the prompts' digest
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from speedbench.results.runlock import CellLocks; "
         f"l = CellLocks({str(tmp_path / 'results' / 'locked')!r}); l.acquire([{cid!r}]); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(validation.ConfigError, match=rf"another speedbench process \(pid {holder.pid}\)"):
            runner.run_cells(run, progress=False, prepared=prepared)
        assert not (tmp_path / "results" / "locked" / "cells").exists()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    (cell,) = runner.run_cells(run, progress=False, prepared=prepared)  # the lock died with its process
    assert cell.status == "ok"


def test_leftover_temp_files_are_cleaned_on_the_next_run(tmp_path):
    run = make_run(tmp_path / "results", "tmpfiles", categories=("coding",))
    run.backend.name = "synthetic"
    from speedbench.pipeline.cells import CellKey

    cid = CellKey.for_run(run, "coding", "", validation.prepare(run).requests).cell_id
    cells = tmp_path / "results" / "tmpfiles" / "cells"
    cells.mkdir(parents=True)
    own, old = cells / f".{cid}.json.abc.tmp", cells / ".cells.csv.def.tmp"
    own.write_text("half")
    old.write_text("half")
    os.utime(old, (0, 0))
    runner.run_cells(run, progress=False)
    assert not own.exists() and not old.exists()


def test_data_validate_reports_bad_utf8_and_lone_surrogates(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"question_id": "a", "category": "coding", "turns": ["ok"]}\n'
                    b'{"question_id": "b", "category": "coding", "turns": ["bad \xff\xfe"]}\n'
                    b'{"question_id": "c", "category": "coding", "turns": ["lone \\ud800 x"]}\n')
    proc = subprocess.run([sys.executable, "-m", "speedbench.cli", "data", "validate", str(bad)], capture_output=True,
                          text=True, timeout=120, env=subprocess_env())
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{bad}:2: invalid UTF-8" in proc.stdout and f"{bad}:3: turns[0]: " in proc.stdout
    run = make_run(tmp_path / "results", "utf8", categories=("coding",))
    run.dataset.path, run.dataset.n_requests = str(bad), None
    with pytest.raises(validation.ConfigError, match="lone surrogate"):
        validation.prepare(run)


def test_control_strings_in_prompt_text_are_refused_escaped_or_kept(tmp_path):
    """`<|eos|>` / `<|assistant|>` in a prompt would become the tokenizer's control tokens."""
    import copy

    from speedbench.data.control import ZERO_WIDTH
    from speedbench.models import load_tokenizer

    prompts = tmp_path / "p.jsonl"
    text = "Stop here <|eos|> then <|assistant|> speak"
    prompts.write_text(json.dumps({"question_id": "a", "category": "coding", "turns": ["plain"]}) + "\n"
                       + json.dumps({"question_id": "b", "category": "coding", "turns": [text]}) + "\n")
    run = make_run(tmp_path / "results", "ctl", categories=("coding",), max_new_tokens=8)
    run.target.path, run.dataset.path, run.dataset.n_requests = "builtin:tiny-target", str(prompts), None

    def mode(name):
        r = copy.deepcopy(run)
        r.dataset.control_tokens = name
        return r

    with pytest.raises(validation.ConfigError, match=rf"{prompts}:2: turns\[0\]: prompt 'b' contains '<\|eos\|>'"):
        validation.prepare(run)  # the default: refuse
    tok = load_tokenizer("builtin:tiny-target")
    specials = set(tok.all_special_ids)
    escaped = validation.prepare(mode("escape"))
    turn = escaped.requests[1].turns[0]
    assert escaped.escaped == {"b"} and ZERO_WIDTH in turn and turn.replace(ZERO_WIDTH, "") == text
    assert not specials & set(tok(turn, add_special_tokens=False)["input_ids"])  # plain text now
    assert specials & set(tok(text, add_special_tokens=False)["input_ids"])  # as it was: control tokens
    kept = validation.prepare(mode("keep"))
    assert kept.requests[1].turns[0] == text and not kept.escaped
    with pytest.raises(validation.ConfigError, match="dataset.control_tokens='nope'"):
        validation.prepare(mode("nope"))
    from speedbench.pipeline.cells import dataset_identity

    assert dataset_identity(mode("keep").dataset) == dataset_identity(run.dataset)  # old folders keep their cell ids
    assert dataset_identity(mode("escape").dataset) != dataset_identity(run.dataset)  # escaped prompts differ


def test_the_one_pass_reads_the_registries_and_each_backend_preflight_once(tmp_path, monkeypatch):
    """Method support, build refusals and draft-model rules come from the registry entries; the
    backend adds only its own rules, once, with the drafter, and nothing is checked per pass."""
    from speedbench.backends import registry as backends
    from speedbench.backends.base import Backend
    from speedbench.config import BackendConfig
    from speedbench.config.engine_options import OpenAIOptions, VllmOptions
    from speedbench.drafters.registry import make_drafter

    assert not hasattr(Backend, "check")
    run = make_run(tmp_path, "r", drafter=make_drafter("eagle", 2),
                   backend=BackendConfig(name="vllm", options=VllmOptions()))
    assert "drafter.model: drafter.method=eagle needs a model" in " ".join(validation.check_models(run)[0])
    monkeypatch.setattr(backends, "on_cpu", lambda name: True)  # the CPU build's refusals, whatever this machine is
    run.drafter = make_drafter("dspark", 2, model="builtin:tiny-draft-small")
    problems, _ = validation.check_models(run)
    if backends.methods("vllm") is not None:  # vLLM installed: the refusal is the registry's, one line
        assert problems == ["drafter.method='dspark' cannot run on backend=vllm: vLLM's CPU build runs only the V1 "
                            "model runner, which does not support dspark ('Model Runner V1 does not support: dspark "
                            "speculative decoding')"]
    run.backend = BackendConfig(name="openai", options=OpenAIOptions(base_url="http://127.0.0.1:9/v1",
                                                                     baseline_url="http://127.0.0.1:9/v1"))
    run.drafter = make_drafter("ngram", 2)
    assert validation.check_models(run)[0] == [
        "backend.options.baseline_url equals base_url: the baseline must be a server without speculation"]
