"""HF generate backend: universal assisted generation with a drafter of another tokenizer, and its refusals."""
import pytest

from speedbench import metrics
from speedbench.config import BackendConfig
from speedbench.drafters.registry import make_drafter
from speedbench.pipeline.validation import check_in_flight

from tests.support.engine_support import D, generate, make_backend, other_tokenizer_drafter
from tests.support.sweep_helpers import make_run

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
    for option in ("batch_size", "load.concurrency"):  # one request in flight: the validation pass refuses more
        run = make_run("unused", "hf", backend=BackendConfig(name="hf"))
        run.batch_size, run.load.concurrency = (4, None) if option == "batch_size" else (1, 4)
        assert [p for p in check_in_flight(run) if f"{option}=4: backend=hf runs at most 1" in p]



def test_hf_generate_steps_in_lockstep_with_the_same_tokens(hf, engine_models):
    """The streamer's put is an iteration boundary: baseline and assisted passes take turns there
    (``protocol.interleave=step``) and give the tokens and acceptance of passes run one after the other."""
    from speedbench.backends.base import GenerateSpec
    from speedbench.config import ProtocolConfig, SamplingConfig
    from speedbench.engine import clock as clock_mod
    from speedbench.pipeline import protocol

    from tests.support.engine_support import requests

    reqs = requests(2)
    specs = {"baseline": GenerateSpec(make_drafter("none"), 1, SamplingConfig(), 16, True, "baseline"),
             "spec": GenerateSpec(make_drafter("draft_model", D, model=engine_models["draft"]), 1, SamplingConfig(), 16,
                                  True, "spec")}
    assert protocol.why_pass(hf, ProtocolConfig()) == ""
    order, original = [], hf.clock.checkpoint

    def logged(progress):  # which pass reached each iteration boundary
        slot = getattr(clock_mod._current, "slot", None)
        order.append(slot[1] if slot else None)
        original(progress)

    got = {}
    hf.clock.checkpoint = logged
    try:
        for mode in ("step", "pass"):
            cfg = ProtocolConfig(interleave=mode, min_repeats=1, max_repeats=1, max_load_per_cpu=1e9)
            got[mode] = protocol.measure(hf, reqs, specs, cfg)
            assert got[mode].interleave == mode
            if mode == "step":
                stepped, order[:] = list(order), []
    finally:
        del hf.clock.checkpoint
    for role in ("base", "spec"):
        step, back = getattr(got["step"], role), getattr(got["pass"], role)
        assert [r.output_ids for r in step.requests] == [r.output_ids for r in back.requests]
        assert all(r.status == "ok" and r.tpot > 0 and r.ttft > 0 for r in step.requests)
    assert [(s.drafted, s.accepted) for s in got["step"].spec.steps] == [(s.drafted, s.accepted) for s in got["pass"].spec.steps]
    switches = sum(1 for x, y in zip(stepped, stepped[1:]) if x != y)
    assert switches >= 4 and stepped.count("baseline") > stepped.count("spec"), stepped  # in turn, ~AL baseline steps each
