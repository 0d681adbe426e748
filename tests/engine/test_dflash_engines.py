"""DFlash on both engines: the shipped tiny target with builtin:tiny-dflash, greedy, D=4, 32 new tokens
with ignore_eos, batch 1, on dataset=mini's 6 prompts (coding, math, writing: 2 each, as
conf/dataset/mini.yaml selects them) and the 3 smoke prompts; the reference engine's dflash drafter
and vLLM's ``dflash`` method (one engine started for the module).

Tolerances (why): each engine's DFlash output equals the reference engine's greedy baseline token
for token (lossless). AL, overall and per category of mini: both engines draft the same block
(bonus token + D masks, non-causal, the target's features after layers 1, 2, 3 as context), so on
identical outputs the proposals are the same argmaxes and the ALs agree within 0.01 (equal when
measured).
"""
import pytest

from speedbench import metrics
from speedbench.data import DatasetSpec, load_requests

from tests.support.engine_support import D, MAX_NEW_TOKENS, generate, make_backend, requests

pytestmark = pytest.mark.engine
TARGET, DFLASH = "builtin:tiny-target", "builtin:tiny-dflash"
MINI = ("coding", "math", "writing")  # conf/dataset/mini.yaml


MINI_PROMPTS = list(load_requests(DatasetSpec(path="qualitative.jsonl", categories=MINI, n_requests=6, seed=0,
                                               max_new_tokens=MAX_NEW_TOKENS)))
PROMPTS = MINI_PROMPTS + list(requests())
CATEGORY = {r.request_id: r.category for r in MINI_PROMPTS}  # mini's prompts only (the smoke ones are not counted)


@pytest.fixture(scope="module")
def runs():
    torch_backend = make_backend("torch", TARGET)
    vllm = make_backend("vllm", TARGET, {"max_engines": 4})
    try:
        return {"baseline": generate(torch_backend, "none", reqs=PROMPTS),
                "torch": generate(torch_backend, "dflash", DFLASH, reqs=PROMPTS),
                "vllm": generate(vllm, "dflash", DFLASH, reqs=PROMPTS)}
    finally:
        vllm.close()


def test_every_request_succeeded(runs):
    assert sorted(CATEGORY.values()) == sorted(MINI * 2)
    for name, run in runs.items():
        assert [r.status for r in run.requests] == ["ok"] * len(PROMPTS), (name, [r.error for r in run.requests])
        assert all(r.n_tokens == MAX_NEW_TOKENS for r in run.requests), name


def test_both_engines_give_the_targets_greedy_tokens(runs):
    for engine in ("torch", "vllm"):
        agree = metrics.agreement(runs["baseline"].requests, runs[engine].requests)
        print(f"{engine} DFlash vs reference baseline: {agree}")
        assert agree.match_rate == 1.0, (engine, agree)


def test_dflash_al_agrees_across_engines(runs):
    ref, vllm = (metrics.acceptance(runs[e].requests, D) for e in ("torch", "vllm"))
    print(f"DFlash AL at D={D}, all {len(PROMPTS)} prompts: torch {ref.al:.3f} (drafts {ref.drafts}), vllm {vllm.al:.3f} "
          f"(drafts {vllm.drafts}); per position torch {ref.per_position()}, vllm {vllm.per_position()}")
    assert 1.1 < ref.al < 1 + D  # a trained draft: accepted often, not always
    assert abs(vllm.al - ref.al) <= 0.01


@pytest.mark.parametrize("category", MINI)
def test_dflash_al_agrees_across_engines_per_category_of_mini(runs, category):
    ref, vllm = (metrics.acceptance([r for r in runs[e].requests if CATEGORY.get(r.request_id) == category], D)
                 for e in ("torch", "vllm"))
    print(f"DFlash AL at D={D}, mini {category}: torch {ref.al:.3f} (drafts {ref.drafts}), vllm {vllm.al:.3f} "
          f"(drafts {vllm.drafts})")
    assert ref.drafts >= 2 * (MAX_NEW_TOKENS // (1 + D)) and 1.0 <= ref.al < 1 + D  # its 2 prompts drafted
    assert abs(vllm.al - ref.al) <= 0.01
