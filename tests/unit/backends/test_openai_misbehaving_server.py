"""``backend=openai`` against a misbehaving loopback server (issue #15): nothing hangs a run and
nothing that ended badly passes as ``ok``. Every case is bounded in time."""
import time

import pytest

from speedbench.backends.base import GenerateSpec
from speedbench.backends.openai_backend import OpenAIBackend
from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline.conversations import generate as run_pass
from speedbench.records import Request

from tests.support.openai_loopback import LoopbackServer

MAX_NEW = 8
NGRAM = make_drafter("ngram", 2)
BOUND_S = 8.0  # timeouts below are 1-3 s; anything near this bound means a deadline did not fire


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


def backend(server, behaviour: str, **options) -> OpenAIBackend:
    opts = {"base_url": server.url(behaviour), "baseline_url": server.url("baseline"), "model": "tiny", "metrics": False,
            "timeout_s": 1.0, "first_token_timeout_s": 1.5, "request_timeout_s": 3.0, **options}
    run = RunConfig(target=ModelConfig(name="tiny", path="random:tiny-target"), drafter=NGRAM, dataset=DatasetConfig(),
                    backend=BackendConfig(name="openai", options=opts), sampling=SamplingConfig(),
                    max_new_tokens=MAX_NEW, run_id="loopback")
    return OpenAIBackend(run.target, run.backend, run.seed)


def generate(b: OpenAIBackend, drafter=NGRAM, ignore_eos=False):
    reqs = [Request(f"r{i}", "coding", ("def add(a, b):",), MAX_NEW) for i in range(2)]
    t0 = time.monotonic()
    out = run_pass(b, reqs, GenerateSpec(drafter, 2, SamplingConfig(), MAX_NEW, ignore_eos, "spec"))
    return out, time.monotonic() - t0


def test_a_well_behaved_stream_is_ok(server):
    out, wall = generate(backend(server, "ok"))
    assert [r.status for r in out.requests] == ["ok", "ok"], [r.error for r in out.requests]
    assert all(r.n_tokens == MAX_NEW for r in out.requests)
    assert wall < BOUND_S


@pytest.mark.parametrize("behaviour, reason", [
    ("http500", "HTTP 500"),
    ("hang", "read timeout"),
    ("trickle", "first-token deadline"),
    ("early", "without a finish_reason or [DONE]"),
    ("malformed", "malformed JSON"),
    ("empty", "no tokens"),
    ("too_many", f"24 tokens for max_tokens={MAX_NEW}"),
])
def test_a_misbehaving_server_is_recorded_failed_with_the_reason(server, behaviour, reason):
    out, wall = generate(backend(server, behaviour))
    assert wall < BOUND_S, f"{behaviour}: {wall:.1f} s"
    assert [r.status for r in out.requests] == ["failed", "failed"]
    assert all(reason in r.error for r in out.requests), [r.error for r in out.requests]


def test_the_whole_request_deadline_ends_a_slow_stream_after_its_first_token(server):
    # keep-alives after a real token: every read is short and the first token came; only the total deadline ends it
    out, wall = generate(backend(server, "slow", request_timeout_s=2.0))
    assert wall < BOUND_S
    assert all(r.status == "failed" and "total deadline" in r.error for r in out.requests), [r.error for r in out.requests]


def test_ignore_eos_needs_every_requested_token(server):
    b = backend(server, "ok", vllm_extensions=True)
    out, _ = generate(b, ignore_eos=True)
    assert all(r.status == "ok" for r in out.requests)


@pytest.mark.parametrize("key, value", [("timeout_s", 0), ("request_timeout_s", -1), ("connect_timeout_s", "soon")])
def test_bad_timeout_options_are_refused(server, key, value):
    with pytest.raises(ValueError, match=key):
        backend(server, "ok", **{key: value})
