"""Medusa on both engines: the shipped tiny target with builtin:tiny-medusa (3 heads), greedy, fp32,
D=3 (vLLM's medusa drafts exactly num_heads tokens), the same 3 prompts, 32 new tokens with
ignore_eos; the reference engine's medusa drafter and vLLM's medusa method (one engine started
for the module).

Tolerances (why): both outputs equal the reference engine's own greedy baseline token for token
(lossless; fp32 argmaxes of the same weights). AL within 0.01: both engines draft from the same
hidden state (the target's final normed state at the last accepted token) with the same heads,
so on identical outputs the proposals are the same argmaxes and the AL is equal.
"""
import pytest

from speedbench import metrics

from tests.support.engine_support import generate, make_backend

pytestmark = pytest.mark.engine
TARGET, MEDUSA, D = "builtin:tiny-target", "builtin:tiny-medusa", 3


@pytest.fixture(scope="module")
def runs():
    torch_backend = make_backend("torch", TARGET)
    vllm = make_backend("vllm", TARGET, {"max_engines": 1})
    try:
        return {"baseline": generate(torch_backend, "none"), "torch": generate(torch_backend, "medusa", MEDUSA, depth=D),
                "vllm": generate(vllm, "medusa", MEDUSA, depth=D)}
    finally:
        vllm.close()


def test_every_request_succeeded(runs):
    for name, run in runs.items():
        assert [r.status for r in run.requests] == ["ok"] * 3, (name, [r.error for r in run.requests])
        assert all(r.n_tokens == 32 for r in run.requests), name


def test_both_engines_give_the_targets_greedy_tokens(runs):
    assert metrics.agreement(runs["baseline"].requests, runs["torch"].requests).match_rate == 1.0
    agree = metrics.agreement(runs["baseline"].requests, runs["vllm"].requests)
    print(f"vLLM Medusa vs reference baseline: {agree}")
    assert agree.match_rate == 1.0, agree


def test_medusa_al_agrees_across_engines(runs):
    ref, vllm = (metrics.acceptance(runs[e].requests, D) for e in ("torch", "vllm"))
    print(f"Medusa AL at D={D}: torch {ref.al:.3f} (drafts {ref.drafts}), vllm {vllm.al:.3f} (drafts {vllm.drafts}); "
          f"per position torch {ref.per_position()}, vllm {vllm.per_position()}")
    assert 1.2 < ref.al < 1 + D  # trained heads: accepted often, not always
    assert abs(vllm.al - ref.al) <= 0.01
