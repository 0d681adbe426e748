"""``backend=openai`` against real vLLM servers on 127.0.0.1: one with ngram speculation, one without.

Both servers start in parallel from a module fixture and are stopped (process group) at teardown,
also when a test fails; start-up has a timeout so CI cannot hang on a server that never comes up.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from speedbench import metrics
from speedbench.results import ResultsStore

from tests.support.engine_support import D, VllmServer, generate, make_backend

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
NGRAM = {"method": "ngram", "num_speculative_tokens": D, "prompt_lookup_min": 1, "prompt_lookup_max": 4}


@pytest.fixture(scope="module")
def servers(engine_models, tmp_path_factory):
    logs = tmp_path_factory.mktemp("servers")
    template = logs / "chat.jinja"  # the byte-level tiny tokenizer has no chat template of its own
    template.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:")
    common = ["--chat-template", str(template)]
    spec = VllmServer(engine_models["target"], [*common, "--speculative-config", json.dumps(NGRAM),
                                                "--per-request-spec-decode-metrics", "detailed"], logs / "spec.log")
    base = VllmServer(engine_models["target"], common, logs / "base.log")
    try:
        spec.wait_ready()
        base.wait_ready()
        yield {"base_url": spec.url, "baseline_url": base.url}
    finally:
        spec.stop()
        base.stop()


@pytest.fixture(scope="module")
def client(servers, engine_models):
    return make_backend("openai", engine_models["target"], servers, batch_size=2)


@pytest.fixture(scope="module")
def runs(client):
    warm = generate(client, "ngram", batch_size=2)  # first requests pay the server's own warm-up
    assert all(r.status == "ok" for r in warm.requests), [r.error for r in warm.requests]
    return {"baseline": generate(client, "none", batch_size=2), "ngram": generate(client, "ngram", batch_size=2)}


def test_streamed_outputs_are_lossless_and_timed(runs):
    base, spec = runs["baseline"], runs["ngram"]
    assert all(r.status == "ok" and r.n_tokens == 32 for r in base.requests + spec.requests)
    assert metrics.agreement(base.requests, spec.requests).match_rate == 1.0
    for r in base.requests + spec.requests:
        assert 0 < r.ttft < r.e2e and r.tpot > 0
    assert spec.steps and all(s.t_step > 0 for s in spec.steps)  # chunk inter-arrival times


def test_per_request_acceptance_from_the_response_equals_the_server_counters(runs):
    spec = runs["ngram"]
    acc = metrics.acceptance(spec.requests, D)
    counters = spec.extra["counters"]  # nothing else talks to this server: the delta is ours alone
    assert {r.al_source for r in spec.requests} == {"steps"}
    assert (acc.drafts, acc.accepted) == (counters["drafts"], counters["accepted"]) and acc.drafts > 0
    assert 1 < acc.al <= 1 + D


def test_chunk_acceptance_is_reported_beside_it(runs):
    spec = runs["ngram"]
    assert 1 <= spec.extra["al_chunks"] <= 1 + D
    assert 0 <= spec.extra["merged_chunk_frac"] <= 1
    assert runs["baseline"].extra["counters"]["drafts"] == 0


def test_chat_endpoint_streams_and_reports_acceptance(servers, engine_models):
    chat = make_backend("openai", engine_models["target"], servers | {"endpoint": "chat"}, batch_size=2)
    base, spec = generate(chat, "none", batch_size=2), generate(chat, "ngram", batch_size=2)
    assert all(r.status == "ok" and r.n_tokens == 32 for r in base.requests + spec.requests), \
        [r.error for r in base.requests + spec.requests]
    assert metrics.agreement(base.requests, spec.requests).match_rate == 1.0
    assert {r.al_source for r in spec.requests} == {"steps"} and 1 <= metrics.acceptance(spec.requests, D).al <= 1 + D


def test_a_server_with_another_draft_length_is_refused(client):
    out_err = None
    try:
        generate(client, "ngram", batch_size=2, depth=D + 2)
    except ValueError as exc:
        out_err = str(exc)
    assert out_err and f"speculates {D} tokens" in out_err


def test_a_speculative_url_that_serves_no_speculation_is_not_measured(servers, engine_models):
    """Both URLs one plain vLLM server (the "speculative" one spelled ``localhost``): its /metrics shows
    0 drafts, so the pass fails naming the URL (it was recorded ok as ngram D=4, AL 1.0)."""
    plain = servers["baseline_url"].replace("127.0.0.1", "localhost")
    backend = make_backend("openai", engine_models["target"], {**servers, "base_url": plain}, batch_size=2)
    with pytest.raises(ValueError, match="drafted nothing") as info:
        generate(backend, "ngram", batch_size=2)
    assert plain in str(info.value)


def test_cli_run_against_the_servers_keeps_the_key_out_of_results(servers, engine_models, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), SB_TEST_KEY="sk-test-0123456789abcdef")
    args = [
        sys.executable, "-m", "speedbench.cli", "run", "backend=openai", f"results_dir={tmp_path}", "run_id=oa",
        f"target.path={engine_models['target']}", "drafter=ngram", f"drafter.num_speculative_tokens={D}",
        f"backend.options.base_url={servers['base_url']}", f"backend.options.baseline_url={servers['baseline_url']}",
        "backend.options.api_key_env=SB_TEST_KEY", "batch_size=2", "max_new_tokens=16", "dataset=mini", "dataset.categories=[math]", "dataset.n_requests=2",
    ]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = ResultsStore(tmp_path / "oa").cells()
    assert (cells.status == "ok").all() and (cells.greedy_match_rate == 1.0).all()
    assert (cells.al_source == "steps").all() and cells.al.between(1, 1 + D).all()
    text = "".join(p.read_text(errors="ignore") for p in (tmp_path / "oa").rglob("*") if p.is_file() and p.suffix != ".parquet")
    assert "sk-test-0123456789abcdef" not in text
