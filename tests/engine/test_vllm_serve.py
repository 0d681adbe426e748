"""``backend=vllm_serve`` and ``backend=openai`` on real vLLM servers on 127.0.0.1.

The module starts one baseline and one ngram server once (through the vllm_serve backend, as a
run does), measures a closed-loop point (C=2) and an open-loop point (Poisson arrivals) on them
in-process, then points ``backend=openai`` at the same two URLs (completions and chat, the CLI
with a key), then stops them and checks by pid that nothing is left; a CLI run SIGTERMed while its
own servers start must leave no server process either. One server pair serves both backends:
each vLLM start on 2 CPU cores costs tens of seconds.
"""
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from speedbench import metrics
from speedbench.config import BackendConfig, DatasetConfig, LoadConfig, ModelConfig, ProtocolConfig, RunConfig, SamplingConfig, SloConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import runner
from speedbench.results import ResultsStore

from tests.support.engine_support import D, generate, make_backend

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
OPTIONS = {"engine_args": {"kv_cache_memory_bytes": 256 << 20}, "max_num_seqs": 4}


def group_members(pgids: set[int]) -> list[int]:
    """Every live process whose process group is one of ``pgids``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) in pgids:
                    out.append(int(entry))
            except ProcessLookupError:
                pass
    return out


def gone(pgids: set[int], timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := group_members(pgids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def make_point(tmp, target: str, run_id: str, options: dict, **load) -> RunConfig:
    return RunConfig(
        target=ModelConfig(name="tiny", path=target),
        drafter=make_drafter("ngram", D, prompt_lookup_min=1, prompt_lookup_max=4),
        dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=["coding", "math"], n_requests=2),
        backend=BackendConfig(name="vllm_serve", options=dict(options)), sampling=SamplingConfig(),
        results_dir=str(tmp), run_id=run_id, max_new_tokens=16, ignore_eos=True, per_category=False, batch_size=2,
        load=LoadConfig(**load), slo=SloConfig(ttft_ms=60_000, tpot_ms=60_000),
        protocol=ProtocolConfig(min_repeats=2, max_repeats=2, budget_s=1.0),
    )


@pytest.fixture(scope="module")
def served(engine_models, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    template = tmp / "chat.jinja"  # the byte-level tiny tokenizer has no chat template of its own (backend=openai's chat test)
    template.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:")
    options = OPTIONS | {"server_args": ["--chat-template", str(template)]}
    closed = make_point(tmp, engine_models["target"], "closed", options, concurrency=2, num_requests=4, warmup_requests=2)
    backend = runner.get_backend(closed)
    try:
        t0 = time.perf_counter()
        cells = {"closed": runner.run_cells(closed, progress=False)}
        startup_wall = time.perf_counter() - t0
        pgids = set(backend.servers.pids())
        opened = make_point(tmp, engine_models["target"], "open", options, request_rate=4.0, num_requests=4, warmup_requests=0)
        assert runner.get_backend(opened) is backend  # the same servers measure every load point
        cells["open"] = runner.run_cells(opened, progress=False)
        yield {"backend": backend, "cells": cells, "tmp": tmp, "pgids": pgids, "wall": startup_wall}
    finally:
        backend.close()
        for key in [k for k, b in runner._BACKENDS.items() if b is backend]:
            runner._BACKENDS.pop(key)


def test_servers_start_once_with_logs_and_their_startup_time_outside_the_measurement(served):
    backend, tmp = served["backend"], served["tmp"]
    starts = backend.servers.starts
    assert sorted(s["role"] for s in starts) == ["baseline", "spec-ngram-d4"]  # two starts for two load points
    assert all(0 < s["startup_s"] < served["wall"] for s in starts)
    logs = sorted(p.name for p in (tmp / "closed" / "engine-logs").glob("server-*.log"))
    assert logs == ["server-baseline.log", "server-spec-ngram-d4.log"]
    cell = served["cells"]["closed"][0]
    assert cell.warmup_s < min(s["startup_s"] for s in starts) + cell.warmup_s  # startup is not warm-up
    assert {s["role"] for s in cell.extra["server_starts"]} == {"baseline", "spec-ngram-d4"}
    assert all(u.startswith("http://127.0.0.1:") for u in (s["url"] for s in cell.extra["servers"].values()))


def test_closed_loop_point_has_baseline_and_spec_latency_columns(served):
    (cell,) = served["cells"]["closed"]
    assert cell.status == "ok", cell.error
    assert cell.concurrency == 2 and math.isinf(cell.request_rate) and cell.n_requests == 4 and cell.n_repeats == 2
    assert cell.greedy_match_rate == 1.0 and 1 < cell.al <= 1 + D and cell.al_source == "steps"
    for role in ("baseline", "spec"):
        for x in ("ttft", "tpot", "itl", "e2e", "itl_token"):
            vals = [getattr(cell, f"{x}_ms_{s}_{role}") for s in ("mean", "p50", "p90", "p99")]
            assert all(v > 0 for v in vals) and vals[1] <= vals[2] <= vals[3], (x, role, vals)
        assert getattr(cell, f"output_tok_s_{role}") > 0 and getattr(cell, f"goodput_{role}") == getattr(cell, f"requests_s_{role}")
    # per token, a gap is spread over its chunk's tokens: the mean is never above the per-chunk mean, and
    # below it where chunks carry several tokens (speculation: up to 1 + D per engine step)
    assert cell.itl_token_ms_mean_baseline <= cell.itl_ms_mean_baseline * (1 + 1e-9)
    assert cell.itl_ms_mean_spec > cell.itl_token_ms_mean_spec
    for name in ("speedup", "speedup_throughput", "speedup_goodput"):
        lo, x, hi = (getattr(cell, f"{name}_ci_low"), getattr(cell, name), getattr(cell, f"{name}_ci_high"))
        assert 0 < lo <= x <= hi, (name, lo, x, hi)
    # the server's counters pool every pass of the cell, as al does; chunks matched to the server's own steps
    counters = cell.extra["counters"]
    assert counters["passes"] == 2 and counters["accepted"] == cell.n_accepted
    assert cell.extra["merged_chunk_rule"].startswith("exact") and 0 <= cell.extra["merged_chunk_frac"] <= 1
    assert 1 <= cell.al_emitted <= cell.al
    reqs = pd.read_parquet(served["tmp"] / "closed" / "requests" / f"{cell.cell_id}.parquet")
    assert set(reqs.role) == {"baseline", "spec"} and len(reqs) == 2 * 4 * 2  # roles x requests x repeats
    assert (reqs.t_start >= 0).all() and reqs.chunk_gaps.map(len).gt(0).all()
    base = reqs[reqs.role == "baseline"]
    if base.chunks.map(lambda c: max(c) == 1).all():  # one token per chunk: both ITLs are the same numbers
        assert cell.itl_ms_p50_baseline == pytest.approx(cell.itl_token_ms_p50_baseline)


def test_open_loop_point_is_its_own_cell(served):
    (cell,) = served["cells"]["open"]
    (closed,) = served["cells"]["closed"]
    assert cell.status == "ok", cell.error
    assert cell.request_rate == 4.0 and cell.concurrency == -1 and cell.cell_id != closed.cell_id
    reqs = pd.read_parquet(served["tmp"] / "open" / "requests" / f"{cell.cell_id}.parquet")
    spec0 = reqs[(reqs.role == "spec") & (reqs.repeat == 0)].sort_values("t_start")
    assert spec0.t_start.iloc[-1] > 0.1  # arrivals spread over time, not all at once
    stored = ResultsStore(served["tmp"] / "open").cells()
    assert float(stored.request_rate.iloc[0]) == 4.0


# ---- backend=openai on the same two servers (nothing else talks to them between these tests) ----------
@pytest.fixture(scope="module")
def servers(served):
    """The URLs of the two servers the vllm_serve backend started: what a user would pass to backend=openai."""
    urls = {s.role: s.url for s in served["backend"].servers.servers.values()}
    return {"base_url": urls["spec-ngram-d4"], "baseline_url": urls["baseline"]}


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
    # a step alone in its chunk is timed by the chunk's inter-arrival time; when the server coalesces
    # steps into one chunk (its output collector merges them while the client lags, as on a loaded
    # machine) those steps share the chunk and stay untimed (NaN), never 0 or negative
    timed = [s for s in spec.steps if not math.isnan(s.t_step)]
    assert timed and all(s.t_step > 0 for s in timed)
    for r in spec.requests:
        rows = [s for s in spec.steps if s.request_id == r.request_id]
        untimed = sum(math.isnan(s.t_step) for s in rows)
        if len(r.chunks) - 1 == len(rows):  # one chunk per step after the prefill's: every step timed
            assert untimed == 0, r.request_id


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


def test_closing_the_backend_leaves_no_server_process(served):
    """After every test that uses the servers (pytest runs a module's tests in file order)."""
    pgids = served["pgids"]
    assert len(pgids) == 2 and group_members(pgids)  # alive before
    served["backend"].close()
    assert gone(pgids) == []


def test_sigterm_of_a_harness_run_leaves_no_server_process(engine_models, tmp_path):
    args = [sys.executable, "-m", "speedbench.cli", "run", "backend=vllm_serve", f"results_dir={tmp_path}", "run_id=t",
            f"target.path={engine_models['target']}", "drafter=ngram", f"drafter.num_speculative_tokens={D}",
            "+backend.options.engine_args.kv_cache_memory_bytes=268435456", "dataset=mini", "max_new_tokens=8"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    harness = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    logs = tmp_path / "t" / "engine-logs"
    pgids: set[int] = set()
    deadline = time.monotonic() + 120
    while len(pgids) < 2 and time.monotonic() < deadline and harness.poll() is None:
        pgids = {int(m) for p in logs.glob("server-*.log") for m in re.findall(r"# pid (\d+)", p.read_text(errors="ignore"))}
        time.sleep(0.5)
    assert len(pgids) == 2, harness.stderr.read().decode()[-2000:] if harness.poll() is not None else "no server logs"

    def every_server_has_a_child():  # each server has started its engine process: SIGTERM lands mid-start-up
        return all(len(group_members({g})) > 1 for g in pgids)

    deadline = time.monotonic() + 90
    while not every_server_has_a_child() and time.monotonic() < deadline and harness.poll() is None:
        time.sleep(0.5)
    assert every_server_has_a_child(), "a server started no engine process within 90 s"
    harness.send_signal(signal.SIGTERM)
    harness.wait(timeout=120)
    assert harness.returncode != 0
    assert gone(pgids) == []
