"""HF generate backend: universal assisted generation with a drafter of another tokenizer, and its refusals."""
import pytest

from speedbench import metrics
from speedbench.drafters.registry import make_drafter

from tests.support.engine_support import D, generate, make_backend, other_tokenizer_drafter

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def hf(engine_models):
    return make_backend("hf", engine_models["target"])


def test_a_drafter_with_another_tokenizer_runs_as_universal_assisted_generation(hf, tmp_path):
    draft = other_tokenizer_drafter(tmp_path / "bpe-draft")
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(draft)) != len(hf.tokenizer)  # really another vocabulary
    base = generate(hf, "none")
    spec = generate(hf, "draft_model", draft)
    assert spec.extra.get("universal_assisted_generation") is True
    assert all(r.status == "ok" for r in spec.requests), [r.error for r in spec.requests]
    assert metrics.agreement(base.requests, spec.requests).match_rate == 1.0  # greedy UAG is lossless
    acc = metrics.acceptance(spec.requests, D)
    assert acc.drafts > 0 and 1 <= acc.al <= 1 + D + 1e-9
    assert {r.al_source for r in spec.requests} == {"steps"}
    assert all(s.drafted >= 1 for s in spec.steps if s.drafted)  # candidates re-tokenised into target tokens


def test_hf_refuses_what_it_cannot_run(hf, engine_models):
    from speedbench.backends.registry import methods

    assert ["backend=hf: prompt lookup has no minimum n-gram size; set drafter.prompt_lookup_min=1"] == \
        type(hf).preflight(hf.engine, 1, make_drafter("ngram", 2, prompt_lookup_min=2))
    assert "layer_skip" not in methods("hf") and "draft_model" in methods("hf")
    assert any("batch_size=1" in p for p in type(hf).preflight(hf.engine, 4, make_drafter("ngram", 2)))
