"""The one conversation loop (``pipeline/conversations``), through both of its drivers: the
engine's own reply to turn i is in the prompt of turn i+1, conversations with fewer turns drop
out of a batch, and a failure is recorded as data while the pass goes on.

Static batches run on the reference engine (the random tiny target); per-request servers on the
loopback OpenAI-compatible server, whose request log shows exactly what was sent."""
import pytest

from speedbench import models
from speedbench.backends.base import GenerateSpec
from speedbench.backends.registry import BACKENDS
from speedbench.backends.openai_backend import OpenAIBackend
from speedbench.config import BackendConfig, ModelConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.data.chat import render_conversation
from speedbench.pipeline.conversations import generate
from speedbench.records import Request

from tests.support.openai_loopback import TOKEN, LoopbackServer

MAX_NEW = 6
TARGET = ModelConfig(name="tiny", path="random:tiny-target")
TWO = Request("two", "coding", ("first question", "and a follow-up"), MAX_NEW)
ONE = Request("one", "coding", ("a single question",), MAX_NEW)


def spec(batch: int, drafter=None) -> GenerateSpec:
    return GenerateSpec(drafter or make_drafter("none"), batch, SamplingConfig(), MAX_NEW, True, "baseline")


def test_a_static_batch_carries_each_reply_into_the_next_turn():
    backend = BACKENDS.get("torch")(TARGET, BackendConfig(name="torch"))
    tok = models.load_tokenizer(TARGET.path)
    out = generate(backend, [TWO, ONE], spec(batch=2))  # ragged: the second row has no turn 2
    by_id = {r.request_id: r for r in out.requests}
    assert all(r.status == "ok" for r in out.requests), [r.error for r in out.requests]
    two, one = by_id["two"], by_id["one"]
    assert two.turn_tokens == (MAX_NEW, MAX_NEW) and one.turn_tokens == (MAX_NEW,)
    reply = tok.decode(list(two.output_ids[:MAX_NEW]), skip_special_tokens=True)
    first = render_conversation(tok, [], TWO.turns[0], tokenize=True)
    second = render_conversation(tok, [(TWO.turns[0], reply)], TWO.turns[1], tokenize=True)
    without_reply = render_conversation(tok, [(TWO.turns[0], "")], TWO.turns[1], tokenize=True)
    assert len(second) > len(without_reply)  # the reply is not empty, so the check below can fail
    assert two.prompt_tokens == len(first) + len(second)  # turn 2 was asked with the engine's own reply
    assert one.prompt_tokens == len(render_conversation(tok, [], ONE.turns[0], tokenize=True))
    assert {s.turn for s in out.steps if s.request_id == "two"} == {0, 1}


@pytest.fixture(scope="module")
def server():
    with LoopbackServer() as srv:
        yield srv


def server_backend(server, behaviour: str) -> OpenAIBackend:
    opts = {"base_url": server.url(behaviour), "baseline_url": server.url(behaviour), "model": "tiny", "metrics": False,
            "timeout_s": 2.0, "first_token_timeout_s": 2.0, "request_timeout_s": 5.0}
    return OpenAIBackend(TARGET, BackendConfig(name="openai", options=opts), 0)


def test_a_server_conversation_sends_the_reply_it_streamed_back(server):
    backend = server_backend(server, "ok")
    start = len(server.requests)
    out = generate(backend, [TWO, ONE], spec(batch=2))
    assert [r.status for r in out.requests] == ["ok", "ok"], [r.error for r in out.requests]
    sent = [q["body"]["prompt"] for q in server.requests[start:] if "prompt" in q["body"]]
    assert len(sent) == 3  # two turns of one conversation, one of the other
    tok = backend.tokenizer
    reply = tok.decode([TOKEN] * MAX_NEW, skip_special_tokens=True)  # what the server streamed
    second = render_conversation(tok, [(TWO.turns[0], reply)], TWO.turns[1], tokenize=True)
    assert list(second) in [list(p) for p in sent]
    assert next(r for r in out.requests if r.request_id == "two").turn_tokens == (MAX_NEW, MAX_NEW)
    client = out.extra["client"]  # the client's own cost over the pass (a server point's client_bound reads it)
    assert client["chunks"] == sum(len(r.chunks) for r in out.requests) > 0
    assert client["cpu_s"] > 0 and 0 < client["cpu_share"] and client["window_s"] > 0


def test_a_failed_conversation_is_data_and_the_pass_goes_on(server):
    out = generate(server_backend(server, "http500"), [TWO, ONE], spec(batch=2))
    assert [r.status for r in out.requests] == ["failed", "failed"]
    assert all("HTTP 500" in r.error for r in out.requests)
    assert out.steps == []
