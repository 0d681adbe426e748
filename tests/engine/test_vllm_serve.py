"""``backend=vllm_serve``: real vLLM servers the harness starts itself on 127.0.0.1, and load points.

The module starts one baseline and one ngram server once (through the backend, as a run does),
measures a closed-loop point (C=2) and an open-loop point (Poisson arrivals) on them in-process,
then stops them and checks by pid that nothing is left; a CLI run SIGTERMed while its own
servers start must leave no server process either.
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

from speedbench.config import BackendConfig, DatasetConfig, LoadConfig, ModelConfig, ProtocolConfig, RunConfig, SamplingConfig, SloConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import runner
from speedbench.results import ResultsStore

from tests.support.engine_support import D

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


def make_point(tmp, target: str, run_id: str, **load) -> RunConfig:
    return RunConfig(
        target=ModelConfig(name="tiny", path=target),
        drafter=make_drafter("ngram", D, prompt_lookup_min=1, prompt_lookup_max=4),
        dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=["coding", "math"], n_requests=2),
        backend=BackendConfig(name="vllm_serve", options=dict(OPTIONS)), sampling=SamplingConfig(),
        results_dir=str(tmp), run_id=run_id, max_new_tokens=16, ignore_eos=True, per_category=False, batch_size=2,
        load=LoadConfig(**load), slo=SloConfig(ttft_ms=60_000, tpot_ms=60_000),
        protocol=ProtocolConfig(min_repeats=2, max_repeats=2, budget_s=1.0),
    )


@pytest.fixture(scope="module")
def served(engine_models, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    closed = make_point(tmp, engine_models["target"], "closed", concurrency=2, num_requests=4, warmup_requests=2)
    backend = runner.get_backend(closed)
    try:
        t0 = time.perf_counter()
        cells = {"closed": runner.run_cells(closed, progress=False)}
        startup_wall = time.perf_counter() - t0
        pgids = set(backend.servers.pids())
        opened = make_point(tmp, engine_models["target"], "open", request_rate=4.0, num_requests=4, warmup_requests=0)
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


def test_closing_the_backend_leaves_no_server_process(served):
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
    time.sleep(8)  # the servers are now starting their engine processes
    assert group_members(pgids)
    harness.send_signal(signal.SIGTERM)
    harness.wait(timeout=120)
    assert harness.returncode != 0
    assert gone(pgids) == []
