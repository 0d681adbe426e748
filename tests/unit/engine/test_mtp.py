"""MTP: the shipped MiMo-style target's checkpoint layout, training unroll == cached drafting,
lossless greedy drafting in the reference engine, and vLLM (method mtp) against the reference engine."""
import json

import pytest
import torch
from safetensors.torch import load_file

from speedbench import models
from speedbench.drafters import build_drafter
from speedbench.engine.cached_lm import BEFORE_FINAL_NORM, forward_before_final_norm
from speedbench.engine.decode import generate
from speedbench.engine.drafting import History
from speedbench.engine.mtp_layer import ARCHITECTURE, PREFIX
from speedbench.engine.sampling import SamplingParams
from speedbench.fixtures import model_path
from speedbench.fixtures.eagle3 import ttt_unroll
from speedbench.fixtures.mtp import NAME

from tests.support.drafting import make_context
from tests.unit.engine.test_lossless import prompts

GREEDY = SamplingParams()
# what vLLM's MiMoMTP maps onto its layer (mtp_block.* after its WeightsMapper), below PREFIX
VLLM_MTP_KEYS = {
    "token_layernorm.weight", "hidden_layernorm.weight", "input_proj.weight", "final_layernorm.weight",
    "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight",
    *(f"self_attn.{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")),
    *(f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
}


@pytest.fixture(scope="module")
def mtp_target():
    return models.load_model(f"builtin:{NAME}")


def test_checkpoint_has_the_mimo_mtp_layout():
    folder = model_path(NAME)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == [ARCHITECTURE] and cfg["model_type"] == "qwen2"
    assert cfg["num_nextn_predict_layers"] == 1
    keys = set(load_file(str(folder / "model.safetensors")))
    assert {k[len(PREFIX):] for k in keys if k.startswith(PREFIX)} == VLLM_MTP_KEYS
    assert not any("mtp_layers" in k and not k.startswith(PREFIX) for k in keys)


@pytest.mark.parametrize("impl", ["lean", "hf"])
def test_captured_last_hidden_state_is_before_the_final_norm(mtp_target, impl):
    """What vLLM's MiMo body hands its MTP proposer: the residual stream after the last layer,
    not HF's hidden_states[-1] (after the final norm, which capture id num_layers still gives, as Medusa
    reads it); HF's untied last hidden state is the reference."""
    ctx = make_context(mtp_target, mtp_target, impl)
    lm = ctx.make_lm(mtp_target)
    lm.capture = (BEFORE_FINAL_NORM,)
    x = torch.tensor([prompts(1)[0]])
    cfg = mtp_target.config
    with torch.no_grad():
        lm.reset(1, 64)
        lm.forward(x)
        normed = mtp_target(input_ids=x, output_hidden_states=True).hidden_states[-1]
        before, cfg.tie_last_hidden_states = getattr(cfg, "tie_last_hidden_states", None), False
        try:
            expected = mtp_target(input_ids=x, output_hidden_states=True).hidden_states[-1]
        finally:
            cfg.tie_last_hidden_states = before
    assert not torch.allclose(expected, normed, atol=1e-2)
    torch.testing.assert_close(lm.captured.float(), expected, rtol=1e-4, atol=1e-4)
    lm.capture = (cfg.num_hidden_layers,)
    with torch.no_grad():
        lm.reset(1, 64)
        lm.forward(x)
    torch.testing.assert_close(lm.captured.float(), normed, rtol=1e-4, atol=1e-4)


def test_training_unroll_equals_cached_drafting(mtp_target):
    """Step s of the training unroll at position p == the drafter's (s+1)-th draft after p+1 tokens,
    position 0 (whose token embedding the layer zeroes) included."""
    ctx = make_context(mtp_target, mtp_target, "lean")
    drafter = build_drafter("mtp", ctx, {})
    x = torch.tensor([prompts(1)[0] + prompts(2)[1]])
    steps = 3
    with torch.no_grad():
        hidden = forward_before_final_norm(mtp_target, input_ids=x)[1]
        unrolled = list(ttt_unroll(drafter.layer.step, drafter.embed, hidden[:, :-1], x, steps))
        for p in (0, 6):
            drafter.reset(History(1, 64, torch.device("cpu")), 64)
            out = drafter._run(x[:, 1: p + 2], hidden[:, : p + 1], torch.arange(p + 1)[None])
            torch.testing.assert_close(out[:, -1], unrolled[0][:, p], rtol=1e-4, atol=1e-4)
            h = out[:, -1:]
            for s in range(1, steps):
                h = drafter._run(x[:, p + 1 + s: p + 2 + s], h, torch.tensor([[p + s]]))
                torch.testing.assert_close(h[:, -1], unrolled[s][:, p], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("impl", ["lean", "hf"])
@pytest.mark.parametrize("batch", [1, 4])
def test_mtp_greedy_spec_equals_baseline_and_accepts(mtp_target, clock, impl, batch):
    ctx = make_context(mtp_target, mtp_target, impl)
    with torch.inference_mode():
        base = generate(ctx.make_lm(mtp_target), build_drafter("none", ctx, {}), prompts(batch), 0, 24, GREEDY,
                        set(), clock)
        for depth in (1, 3):
            spec = generate(ctx.make_lm(mtp_target), build_drafter("mtp", ctx, {}), prompts(batch), depth, 24,
                            GREEDY, set(), clock)
            assert spec.outputs == base.outputs, f"mtp D={depth} B={batch} diverged from greedy"


def test_mtp_refuses_a_target_without_an_mtp_layer(tiny_target, tiny_draft):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    with pytest.raises(ValueError, match="mtp"):
        build_drafter("mtp", ctx, {})


_SETTINGS = ["target=tiny_mtp", "drafter=tiny_mtp", "dataset=smoke", "dataset.categories=[coding,writing]",
             "max_new_tokens=32", "warmup_batches=0"]


def _run_cli(tmp_path, run_id, *overrides):
    import subprocess
    import sys

    from speedbench.results import ResultsStore

    cmd = [sys.executable, "-m", "speedbench.cli", "run", *_SETTINGS, f"results_dir={tmp_path}",
           f"run_id={run_id}", *overrides]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ResultsStore(tmp_path / run_id).cells().set_index("category")


@pytest.mark.engine
def test_vllm_runs_the_mtp_target_like_the_reference_engine(tmp_path):
    """vLLM (CPU, method mtp -> mimo_mtp) serves the shipped MTP target losslessly, with the
    reference engine's acceptance on the same prompts (temperature 0)."""
    ref = _run_cli(tmp_path, "torch")
    vllm = _run_cli(tmp_path, "vllm", "backend=vllm")
    assert set(vllm.backend) == {"vllm"} and set(vllm.method) == {"mtp"}
    for cells in (ref, vllm):
        assert (cells.status == "ok").all()
        assert (cells.greedy_match_rate == 1.0).all()
        assert (cells.al > 1.2).all()
    # the same drafts on the same greedy outputs: AL equal per category (the 0.01)
    for cat in ("coding", "writing"):
        assert abs(vllm.al[cat] - ref.al[cat]) <= 0.01, (cat, vllm.al[cat], ref.al[cat])
