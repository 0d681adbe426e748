"""Medusa: the heads' checkpoint layout (vLLM's medusa with one shared LM head), training ==
inference (the drafter's heads read the hidden state the training loss reads), the captured
final hidden state on both LM implementations, and lossless greedy drafting."""
import json
from pathlib import Path

import pytest
import torch

from speedbench.drafters import build_drafter
from speedbench.engine.decode import generate
from speedbench.engine.drafting import History
from speedbench.engine.medusa_heads import ARCHITECTURE, MedusaHeads, load_heads, save_heads
from speedbench.engine.sampling import SamplingParams
from speedbench.fixtures.medusa import heads_spec, medusa_loss, target_features

from tests.support.drafting import make_context
from tests.unit.engine.test_lossless import prompts

GREEDY = SamplingParams()


def random_heads(target, seed: int = 0) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(heads_spec(target))
    with torch.no_grad():
        heads.lm_head.weight.copy_(target.lm_head.weight)
        for block in heads.blocks:  # nonzero blocks, so that each head drafts something of its own
            for layer in block.layers:
                layer.weight.normal_(0, 0.2)
    return heads.eval()


@pytest.fixture(scope="module")
def heads_dir(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("medusa") / "heads"
    save_heads(random_heads(tiny_target), out, dtype=torch.float32)
    return str(out)


def test_checkpoint_has_vllm_layout(heads_dir):
    from safetensors.torch import load_file

    cfg = json.loads(Path(heads_dir, "config.json").read_text())
    assert cfg["architectures"] == [ARCHITECTURE] and cfg["model_type"] == "medusa"
    assert cfg["original_lm_head"] is True and cfg["truncated_vocab_size"] == cfg["vocab_size"]
    state = load_file(f"{heads_dir}/model.safetensors")
    # vLLM's Medusa with original_lm_head: blocks.{k}.layers.{j}.weight and one lm_head.weight
    assert set(state) == {"lm_head.weight"} | {f"blocks.{k}.layers.0.weight" for k in range(cfg["num_heads"])}


def test_load_heads_names_the_problem(heads_dir, tmp_path):
    import shutil

    cfg = json.loads(Path(heads_dir, "config.json").read_text())
    shutil.copy(f"{heads_dir}/model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, original_lm_head=False)))
    with pytest.raises(ValueError, match="original_lm_head"):
        load_heads(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, num_heads=4)))
    with pytest.raises(ValueError, match="blocks.3"):
        load_heads(tmp_path)


@pytest.mark.parametrize("impl", ["lean", "hf"])
def test_captured_last_layer_is_the_normed_state_the_lm_head_reads(tiny_target, tiny_draft, impl):
    ctx = make_context(tiny_target, tiny_draft, impl)
    lm = ctx.make_lm(tiny_target)
    n = tiny_target.config.num_hidden_layers
    lm.capture = (n,)
    x = torch.tensor([prompts(1)[0]])
    with torch.no_grad():
        lm.reset(1, 64)
        logits = lm.forward(x)
        hidden, _ = target_features(tiny_target, x)
    torch.testing.assert_close(lm.captured.float(), hidden, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.nn.functional.linear(lm.captured.float(), tiny_target.lm_head.weight), logits,
                               rtol=1e-4, atol=1e-4)


def test_drafts_are_what_the_training_loss_scores(tiny_target, tiny_draft, heads_dir):
    """Draft k after history x[:p+2] is head k's argmax at hidden p: the position whose loss
    term is KL(target at p+1+k || head k at p)."""
    ctx = make_context(tiny_target, tiny_draft, "lean")
    drafter = build_drafter("medusa", ctx, {"model": heads_dir})
    x = torch.tensor([prompts(1)[0] + prompts(2)[1]])
    p = 6
    with torch.no_grad():
        hidden, t_logp = target_features(tiny_target, x)
        history = History(1, 64, torch.device("cpu"))
        history.tokens[0, : p + 2] = x[0, : p + 2]
        history.lens[:] = p + 2
        drafter.reset(history, 64)
        drafter.observe(hidden[:, : p + 1], torch.zeros(1, dtype=torch.long))
        proposal = drafter.propose(history, 3, GREEDY, None)
        heads = drafter.heads
        expected = [heads.lm_head(heads.blocks[k](hidden[0, p])).argmax() for k in range(3)]
        loss, per_head = medusa_loss(heads, hidden, t_logp)
    assert proposal.tokens[0].tolist() == [int(e) for e in expected]
    assert len(set(proposal.tokens[0].tolist())) > 1 or per_head[0] != per_head[1]
    assert float(loss) == pytest.approx(sum(per_head), rel=1e-5)


@pytest.mark.parametrize("impl", ["lean", "hf"])
@pytest.mark.parametrize("batch", [1, 4])
def test_medusa_greedy_spec_equals_baseline(tiny_target, tiny_draft, clock, heads_dir, impl, batch):
    ctx = make_context(tiny_target, tiny_draft, impl)
    with torch.inference_mode():
        base = generate(ctx.make_lm(tiny_target), build_drafter("none", ctx, {}), prompts(batch), 0, 24, GREEDY,
                        set(), clock)
        for depth in (1, 3):
            drafter = build_drafter("medusa", ctx, {"model": heads_dir})
            spec = generate(ctx.make_lm(tiny_target), drafter, prompts(batch), depth, 24, GREEDY, set(), clock)
            assert spec.outputs == base.outputs, f"medusa D={depth} B={batch} diverged from greedy"


def test_more_drafts_than_heads_is_refused(tiny_target, tiny_draft, clock, heads_dir):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    drafter = build_drafter("medusa", ctx, {"model": heads_dir})
    with torch.inference_mode(), pytest.raises(ValueError, match="at most its 3 heads"):
        generate(ctx.make_lm(tiny_target), drafter, prompts(1), 4, 8, GREEDY, set(), clock)
