"""Medusa on both engines: the shipped tiny target with builtin:tiny-medusa (3 heads), greedy, fp32,
D=3 (vLLM's medusa drafts exactly num_heads tokens), 32 new tokens with ignore_eos, batch 1, on
dataset=mini's 6 prompts (2 each of coding, math, writing: conf/dataset/mini.yaml) and the 3 smoke
prompts; the reference engine's medusa drafter and vLLM's medusa method (one engine started for the
module).

Tolerances (why): both outputs equal the reference engine's own greedy baseline token for token
(lossless; fp32 argmaxes of the same weights). AL within 0.01, pooled and per category: both engines
draft from the same hidden state (the target's final normed state at the last accepted token) with
the same heads, so on identical outputs the proposals are the same argmaxes and the AL is equal.
"""
import pytest

from speedbench import metrics
from speedbench.data import DatasetSpec, load_requests

from tests.support.engine_support import MAX_NEW_TOKENS, generate, make_backend, requests

pytestmark = pytest.mark.engine
TARGET, MEDUSA, D = "builtin:tiny-target", "builtin:tiny-medusa", 3
MINI = DatasetSpec(path="qualitative.jsonl", categories=("coding", "math", "writing"), n_requests=6, seed=0,
                   max_new_tokens=MAX_NEW_TOKENS)  # dataset=mini


def _prompts():
    return list(load_requests(MINI)) + list(requests())


@pytest.fixture(scope="module")
def runs():
    prompts = _prompts()
    torch_backend = make_backend("torch", TARGET)
    vllm = make_backend("vllm", TARGET, {"max_engines": 4})
    try:
        return {"baseline": generate(torch_backend, "none", reqs=prompts),
                "torch": generate(torch_backend, "medusa", MEDUSA, reqs=prompts, depth=D),
                "vllm": generate(vllm, "medusa", MEDUSA, reqs=prompts, depth=D)}
    finally:
        vllm.close()


def _by_category(run) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in run.requests:
        out.setdefault(r.category, []).append(r)
    return out


def test_every_request_succeeded(runs):
    n = len(_prompts())
    for name, run in runs.items():
        assert [r.status for r in run.requests] == ["ok"] * n, (name, [r.error for r in run.requests])
        assert all(r.n_tokens == MAX_NEW_TOKENS for r in run.requests), name
    assert {"coding", "math", "writing"} <= set(_by_category(runs["torch"])), "dataset=mini's categories"


def test_both_engines_give_the_targets_greedy_tokens(runs):
    assert metrics.agreement(runs["baseline"].requests, runs["torch"].requests).match_rate == 1.0
    agree = metrics.agreement(runs["baseline"].requests, runs["vllm"].requests)
    print(f"vLLM Medusa vs reference baseline: {agree}")
    assert agree.match_rate == 1.0, agree


def test_medusa_al_agrees_across_engines(runs):
    ref, vllm = (metrics.acceptance(runs[e].requests, D) for e in ("torch", "vllm"))
    print(f"Medusa AL at D={D}, all {len(runs['torch'].requests)} prompts: torch {ref.al:.3f} (drafts {ref.drafts}), "
          f"vllm {vllm.al:.3f} (drafts {vllm.drafts}); per position torch {ref.per_position()}, "
          f"vllm {vllm.per_position()}")
    assert 1.2 < ref.al < 1 + D  # trained heads: accepted often, not always
    assert abs(vllm.al - ref.al) <= 0.01


@pytest.mark.parametrize("category", ["coding", "math", "writing"])
def test_medusa_al_agrees_across_engines_per_category(runs, category):
    torch_cat, vllm_cat = _by_category(runs["torch"])[category], _by_category(runs["vllm"])[category]
    assert [r.request_id for r in torch_cat] == [r.request_id for r in vllm_cat]
    ref, vllm = metrics.acceptance(torch_cat, D), metrics.acceptance(vllm_cat, D)
    print(f"Medusa AL at D={D}, {category} ({len(torch_cat)} prompts): torch {ref.al:.3f}, vllm {vllm.al:.3f}")
    assert ref.drafts > 0 and 1.0 <= ref.al < 1 + D
    assert abs(vllm.al - ref.al) <= 0.01
