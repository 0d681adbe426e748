"""Suffix decoding on both engines: the shipped tiny target, greedy, fp32, D=8, 48 new tokens with
ignore_eos, batch 1, on the agentic set's 6 requests and the 3 smoke prompts; the reference engine's
suffix drafter (speedbench/drafters/suffix.py) and vLLM's ``suffix`` method (arctic-inference), one
vLLM engine for the module.

Tolerances (why): the reference engine's output equals its own baseline token for token (lossless,
exactly). vLLM's output is compared with that baseline by token match rate (>= 0.9: greedy argmaxes of
the same fp32 weights, where a near-tie between the engines' kernels could flip a token). AL: the two
drafters follow the same rule on the same trees (one request at a time, in the same order, so the
shared tree of earlier outputs is the same too), so on identical outputs the proposals are identical;
the issue's bound is 5% of the reference AL.

vLLM's half needs the arctic-inference package (``bash scripts/install.sh suffix``): without it those
tests skip, saying so.
"""
from importlib.util import find_spec

import pytest

from speedbench import metrics
from speedbench.backends.base import GenerateSpec
from speedbench.config import DrafterConfig, SamplingConfig
from speedbench.data import DatasetSpec, load_requests
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline import conversations

from tests.support.engine_support import make_backend, requests

pytestmark = pytest.mark.engine
TARGET, D, N_TOKENS = "builtin:tiny-target", 8, 48
HAVE_ARCTIC = find_spec("arctic_inference") is not None
NO_ARCTIC = "arctic-inference is not installed (bash scripts/install.sh suffix builds it): vLLM's suffix method cannot run"


def _prompts():
    agentic = load_requests(DatasetSpec(source="agentic", path="agentic/mini.jsonl", max_new_tokens=N_TOKENS))
    return list(agentic) + list(requests(N_TOKENS))


def _generate(backend, drafter):
    role = "baseline" if drafter.method == "none" else "spec"
    return conversations.generate(backend, _prompts(), GenerateSpec(drafter, 1, SamplingConfig(), N_TOKENS, True, role))


@pytest.fixture(scope="module")
def runs():
    torch_backend = make_backend("torch", TARGET)
    suffix = make_drafter("suffix", D)
    out = {"baseline": _generate(torch_backend, DrafterConfig()), "torch": _generate(torch_backend, suffix)}
    if HAVE_ARCTIC:
        vllm = make_backend("vllm", TARGET, {"max_engines": 4})
        try:
            out["vllm"] = _generate(vllm, suffix)
        finally:
            vllm.close()
    return out


def test_every_request_succeeded(runs):
    for name, run in runs.items():
        assert run.requests and all(r.status == "ok" for r in run.requests), (name, [r.error for r in run.requests])


def test_reference_suffix_decoding_is_lossless_and_drafts(runs):
    assert metrics.agreement(runs["baseline"].requests, runs["torch"].requests).match_rate == 1.0
    ref = metrics.acceptance(runs["torch"].requests, D)
    print(f"reference suffix AL at D={D}: {ref.al:.3f} (drafts {ref.drafts})")
    assert ref.drafts > 0 and 1.0 < ref.al <= 1 + D


@pytest.mark.skipif(not HAVE_ARCTIC, reason=NO_ARCTIC)
def test_vllm_suffix_matches_the_reference_engine(runs):
    agree = metrics.agreement(runs["baseline"].requests, runs["vllm"].requests)
    print(f"vLLM suffix vs reference baseline: {agree}")
    assert agree.token_match_rate >= 0.9, agree
    ref, vllm = (metrics.acceptance(runs[e].requests, D) for e in ("torch", "vllm"))
    print(f"suffix AL at D={D}: torch {ref.al:.3f} (drafts {ref.drafts}), vllm {vllm.al:.3f} (drafts {vllm.drafts})")
    assert abs(vllm.al - ref.al) <= 0.05 * ref.al
