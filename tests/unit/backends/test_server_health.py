"""The dead-or-wedged rule (``backends.server_health``) against a real wedged server on 127.0.0.1: a socket that
takes connections and never answers anything, /health and /metrics included (a server whose process lives and
whose event loop is stuck). It costs the pass one deadline; every other request fails at once, as data."""
import socket
import time

import pytest

from speedbench.backends.base import GenerateSpec
from speedbench.backends.openai_backend import OpenAIBackend
from speedbench.config import BackendConfig, ModelConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline.conversations import generate as run_pass
from speedbench.records import Request

from tests.support.openai_loopback import LoopbackServer

MAX_NEW = 4
NGRAM = make_drafter("ngram", 2)
DEADLINE_S = 1.0


@pytest.fixture
def wedged():
    """Listens (the kernel completes the connections), never accepts, never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def backend(url: str, baseline: str, **options) -> OpenAIBackend:
    opts = {"base_url": url, "baseline_url": baseline, "timeout_s": DEADLINE_S, "connect_timeout_s": DEADLINE_S,
            **options}
    return OpenAIBackend(ModelConfig(name="tiny", path="random:tiny-target"), BackendConfig(name="openai", options=opts))


def one_pass(b: OpenAIBackend, n: int, in_flight: int = 1):
    reqs = [Request(f"r{i}", "coding", ("def add(a, b):",), MAX_NEW) for i in range(n)]
    t0 = time.monotonic()
    out = run_pass(b, reqs, GenerateSpec(NGRAM, in_flight, SamplingConfig(), MAX_NEW, False, "spec"))
    return out, time.monotonic() - t0


@pytest.mark.parametrize("metrics", [True, False])
def test_a_wedged_server_costs_one_deadline_then_every_request_fails_as_data(wedged, metrics):
    # metrics=True: the /metrics read is the first call that gets no answer; False: the first request
    b = backend(wedged, wedged, model="tiny", metrics=metrics)
    out, wall = one_pass(b, 6)
    # one deadline (1 s; a request's first-token deadline is timeout_s) + the health probe (connect_timeout_s)
    assert wall < 2 * DEADLINE_S + 2.0, wall  # before: 6 x the deadline, plus 2 x 30 s of /metrics reads
    assert [r.status for r in out.requests] == ["failed"] * 6
    down = [r for r in out.requests if "is dead or wedged" in r.error]
    assert len(down) >= 5 and all("GET " in r.error and "/health: no answer" in r.error for r in down), \
        [r.error for r in out.requests]
    out, wall = one_pass(b, 3)  # the next pass: known down, nothing is sent, no deadline
    assert wall < 0.5 and all("is dead or wedged" in r.error for r in out.requests)


def test_requests_in_flight_are_cut_when_the_server_is_found_wedged(wedged):
    b = backend(wedged, wedged, model="tiny", metrics=False, first_token_timeout_s=DEADLINE_S)
    out, wall = one_pass(b, 8, in_flight=8)
    assert wall < 2 * DEADLINE_S + 2.0, wall
    assert all(r.status == "failed" for r in out.requests)


def test_a_live_server_that_times_out_one_request_is_not_down():
    # /hang answers GET (404 at /health) and holds every POST: each request fails on its own deadline, none is 'down'
    with LoopbackServer() as srv:
        b = backend(srv.url("hang"), srv.url("ok"), model="tiny", metrics=False)
        out, _ = one_pass(b, 2)
        assert all(r.status == "failed" and "deadline" in r.error and "wedged" not in r.error for r in out.requests), \
            [r.error for r in out.requests]
        assert b.down.why == {}


def test_vllm_serve_starts_a_server_found_down_again_at_its_next_pass(tmp_path):
    import sys

    from speedbench.backends.server_health import server_root
    from speedbench.backends.vllm_serve import VllmServeBackend

    http = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1"]
    b = VllmServeBackend(ModelConfig(name="tiny", path="random:tiny-target"), BackendConfig(name="vllm_serve", options={
        "server_command": http, "vllm_flags": False, "health_path": "/", "port_args": ["{port}"], "ready_timeout_s": 30}))
    b.attach_run_folder(tmp_path)
    try:
        b.ready(NGRAM, 1)
        base, spec = b._current
        b.down.mark(server_root(base.url), "ReadTimeout; then GET /: no answer within 1 s")  # what a pass found
        b.ready(NGRAM, 1)
        assert b._current[1] is spec and b._current[0] is not base  # the wedged one only: stopped, started again
        assert not base.alive() and b._current[0].alive() and b.down.why == {}
    finally:
        b.close()
