"""DFlash on both engines: the shipped tiny target with builtin:tiny-dflash, greedy, D=4, the same
3 prompts, 32 new tokens with ignore_eos; the reference engine's dflash drafter and vLLM's
``dflash`` method (one engine started for the module).

Tolerances (why): each engine's DFlash output equals the reference engine's greedy baseline token
for token (lossless). AL: both engines draft the same block (bonus token + D masks, non-causal, the
target's features after layers 1, 2, 3 as context), so on identical outputs the proposals are the
same argmaxes and the ALs agree within 0.01 (equal when measured).
"""
import pytest

from speedbench import metrics

from tests.support.engine_support import D, generate, make_backend

pytestmark = pytest.mark.engine
TARGET, DFLASH = "builtin:tiny-target", "builtin:tiny-dflash"


@pytest.fixture(scope="module")
def runs():
    torch_backend = make_backend("torch", TARGET)
    vllm = make_backend("vllm", TARGET, {"max_engines": 1})
    try:
        return {"baseline": generate(torch_backend, "none"), "torch": generate(torch_backend, "dflash", DFLASH),
                "vllm": generate(vllm, "dflash", DFLASH)}
    finally:
        vllm.close()


def test_every_request_succeeded(runs):
    for name, run in runs.items():
        assert [r.status for r in run.requests] == ["ok"] * 3, (name, [r.error for r in run.requests])
        assert all(r.n_tokens == 32 for r in run.requests), name


def test_both_engines_give_the_targets_greedy_tokens(runs):
    for engine in ("torch", "vllm"):
        agree = metrics.agreement(runs["baseline"].requests, runs[engine].requests)
        print(f"{engine} DFlash vs reference baseline: {agree}")
        assert agree.match_rate == 1.0, (engine, agree)


def test_dflash_al_agrees_across_engines(runs):
    ref, vllm = (metrics.acceptance(runs[e].requests, D) for e in ("torch", "vllm"))
    print(f"DFlash AL at D={D}: torch {ref.al:.3f} (drafts {ref.drafts}), vllm {vllm.al:.3f} (drafts {vllm.drafts}); "
          f"per position torch {ref.per_position()}, vllm {vllm.per_position()}")
    assert 1.1 < ref.al < 1 + D  # a trained draft: accepted often, not always
    assert abs(vllm.al - ref.al) <= 0.01
