"""EAGLE-3: the head's checkpoint layout, training == inference, the reference-engine drafter,
and the shipped head of the tiny target in the reference engine and in vLLM."""
import json
from pathlib import Path

import pytest
import torch

from speedbench.drafters import build_drafter
from speedbench.engine.decode import generate
from speedbench.engine.eagle3_head import (
    ARCHITECTURE,
    Eagle3Head,
    Eagle3Spec,
    load_head,
    save_head,
)
from speedbench.engine.sampling import SamplingParams
from speedbench.fixtures.eagle3 import (
    AUX_LAYERS,
    head_spec,
    target_features,
    ttt_forward,
)

from tests.support.drafting import make_context
from tests.unit.engine.test_lossless import prompts

GREEDY = SamplingParams()

# vLLM's LlamaForCausalLMEagle3 reads exactly these names (midlayer. -> layers.0.)
VLLM_KEYS = {
    "fc.weight", "norm.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight", "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight",
}


def random_head(target, seed: int = 0) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(head_spec(target))
    with torch.no_grad():  # larger weights than the init so that every path matters numerically
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return head.eval()


@pytest.fixture(scope="module")
def head_dir(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle3") / "head"
    save_head(random_head(tiny_target), out, dtype=torch.float32)
    return str(out)


def variant_head_dir(target, root, draft_vocab: int | None = None, **flags) -> str:
    """A random head with vLLM's optional features: a reduced draft vocabulary (own lm_head and
    d2t), norm_before_residual, norm_output."""
    from dataclasses import replace

    from safetensors.torch import load_file, save_file

    torch.manual_seed(1)
    spec = replace(head_spec(target), draft_vocab_size=draft_vocab, **flags)
    head = Eagle3Head(spec)
    with torch.no_grad():
        for prm in head.parameters():
            prm.add_(torch.randn_like(prm) * 0.05)
    out = root / f"head-{draft_vocab}-{'-'.join(sorted(flags))}"
    save_head(head, out, dtype=torch.float32)
    if draft_vocab:
        state = load_file(str(out / "model.safetensors"))
        keep = torch.randperm(spec.vocab_size)[:draft_vocab].sort().values  # target ids the head can draft
        state["d2t"] = keep - torch.arange(draft_vocab)
        state["lm_head.weight"] = target.lm_head.weight.detach()[keep].clone() * 3
        save_file(state, str(out / "model.safetensors"))
    return str(out)


def test_checkpoint_has_vllm_layout(head_dir):
    from safetensors.torch import load_file

    cfg = json.loads(Path(head_dir, "config.json").read_text())
    assert cfg["architectures"] == [ARCHITECTURE]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == list(AUX_LAYERS)
    assert cfg["num_hidden_layers"] == 1 and cfg["draft_vocab_size"] == cfg["vocab_size"]
    state = load_file(f"{head_dir}/model.safetensors")
    assert set(state) == VLLM_KEYS
    assert state["fc.weight"].shape == (cfg["hidden_size"], len(AUX_LAYERS) * cfg["target_hidden_size"])
    assert state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * cfg["hidden_size"]
    assert Eagle3Spec.from_config(cfg) == load_head(head_dir).spec


def test_load_head_names_the_problem(head_dir, tmp_path):
    cfg = json.loads(Path(head_dir, "config.json").read_text())
    cfg["eagle_config"] = {}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="eagle_aux_hidden_state_layer_ids"):
        load_head(tmp_path)


@pytest.mark.parametrize("impl", ["lean", "hf"])
def test_captured_features_are_the_residual_stream(tiny_target, tiny_draft, impl):
    ctx = make_context(tiny_target, tiny_draft, impl)
    lm = ctx.make_lm(tiny_target)
    lm.capture = AUX_LAYERS
    x = torch.tensor([prompts(1)[0]])
    with torch.no_grad():
        lm.reset(1, 64)
        lm.forward(x)
        expected, _ = target_features(tiny_target, x)
    torch.testing.assert_close(lm.captured.float(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flags", [{}, {"norm_before_residual": True, "norm_output": True}])
def test_training_unroll_equals_cached_drafting(tiny_target, tiny_draft, head_dir, tmp_path, flags):
    """Step s of the TTT unroll at position p == the drafter's (s+1)-th draft after p+1 tokens."""
    ctx = make_context(tiny_target, tiny_draft, "lean")
    path = variant_head_dir(tiny_target, tmp_path, **flags) if flags else head_dir
    drafter = build_drafter("eagle3", ctx, {"model": path})
    head, embed = drafter.head, drafter.embed
    x = torch.tensor([prompts(1)[0] + prompts(2)[1]])
    steps, p = 3, 6
    with torch.no_grad():
        aux, _ = target_features(tiny_target, x)
        unrolled = list(ttt_forward(head, embed, aux, x, steps))
        from speedbench.engine.drafting import History

        history = History(1, 64, torch.device("cpu"))
        drafter.reset(history, 64)
        drafter.observe(aux, torch.zeros(1, dtype=torch.long))
        positions = torch.arange(p + 1)[None]
        out, hidden = drafter._run(x[:, 1 : p + 2], head.fc(aux[:, : p + 1]), positions)
        hidden = hidden[:, -1:]
        torch.testing.assert_close(out[:, -1], unrolled[0][:, p], rtol=1e-4, atol=1e-4)
        for s in range(1, steps):
            out, hidden = drafter._run(x[:, p + 1 + s : p + 2 + s], hidden, torch.tensor([[p + s]]))
            torch.testing.assert_close(out[:, -1], unrolled[s][:, p], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("impl", ["lean", "hf"])
@pytest.mark.parametrize("batch", [1, 4])
def test_eagle3_greedy_spec_equals_baseline(tiny_target, tiny_draft, clock, head_dir, impl, batch):
    ctx = make_context(tiny_target, tiny_draft, impl)
    with torch.inference_mode():
        target = ctx.make_lm(tiny_target)
        base = generate(target, build_drafter("none", ctx, {}), prompts(batch), 0, 24, GREEDY, set(), clock)
        for depth in (1, 4):
            drafter = build_drafter("eagle3", ctx, {"model": head_dir})
            spec = generate(ctx.make_lm(tiny_target), drafter, prompts(batch), depth, 24, GREEDY, set(), clock)
            assert spec.outputs == base.outputs, f"eagle3 D={depth} B={batch} diverged from greedy"


@pytest.mark.parametrize("batch", [1, 4])
def test_reduced_draft_vocabulary_drafts_mapped_ids_losslessly(tiny_target, tiny_draft, clock, tmp_path, batch):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    path = variant_head_dir(tiny_target, tmp_path, draft_vocab=64, norm_before_residual=True)
    drafter = build_drafter("eagle3", ctx, {"model": path})
    allowed = set(drafter.draft_to_target.tolist())
    assert len(allowed) == 64
    proposed = []
    original = drafter.propose

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        proposed.extend(out.tokens.flatten().tolist())
        return out

    drafter.propose = spy
    with torch.inference_mode():
        base = generate(ctx.make_lm(tiny_target), build_drafter("none", ctx, {}), prompts(batch), 0, 24, GREEDY,
                        set(), clock)
        spec = generate(ctx.make_lm(tiny_target), drafter, prompts(batch), 3, 24, GREEDY, set(), clock)
    assert spec.outputs == base.outputs
    assert proposed and set(proposed) <= allowed


def test_head_config_errors_name_the_option(tiny_target, head_dir, tmp_path):
    cfg = json.loads(Path(head_dir, "config.json").read_text())
    import shutil

    shutil.copy(f"{head_dir}/model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, fc_norm=True)))
    with pytest.raises(ValueError, match="fc_norm"):
        load_head(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg, draft_vocab_size=64)))
    with pytest.raises(ValueError, match="d2t"):
        load_head(tmp_path)
    no_ids = dict(cfg, eagle_config={})
    (tmp_path / "config.json").write_text(json.dumps(no_ids))
    assert load_head(tmp_path, target_layers=32).spec.aux_layers == (2, 16, 29)  # vLLM's default rule


def test_eagle3_refuses_a_head_for_another_target(tiny_target, tiny_draft, tmp_path):
    spec = head_spec(tiny_target)
    from dataclasses import replace

    save_head(Eagle3Head(replace(spec, target_hidden_size=128)), tmp_path / "h")
    ctx = make_context(tiny_target, tiny_draft, "lean")
    with pytest.raises(ValueError, match="target_hidden_size"):
        build_drafter("eagle3", ctx, {"model": str(tmp_path / "h")})


_SETTINGS = ["dataset=smoke", "dataset.categories=[coding,writing]", "max_new_tokens=32", "warmup_batches=0"]


def _run_cli(tmp_path, run_id, *overrides):
    import subprocess
    import sys

    from speedbench.results import ResultsStore

    cmd = [sys.executable, "-m", "speedbench.cli", "run", "drafter=tiny_eagle3", *_SETTINGS,
           f"results_dir={tmp_path}", f"run_id={run_id}", *overrides]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ResultsStore(tmp_path / run_id).cells().set_index("category")


@pytest.mark.engine
def test_vllm_runs_the_shipped_head_like_the_reference_engine(tmp_path):
    """vLLM (CPU, method eagle3) loads the shipped head, stays lossless, and accepts about as
    much as the reference engine does with the same head on the same prompts."""
    from tests.support.engine_support import SHIPPED_ON_VLLM, shipped_pair_on_vllm

    ref = _run_cli(tmp_path, "torch")
    vllm = shipped_pair_on_vllm()  # the session's one vLLM run of the shipped pair: the same prompts and settings
    vllm = vllm[vllm.drafter == "tiny_eagle3"].set_index("category")
    assert SHIPPED_ON_VLLM == _SETTINGS and set(vllm.backend) == {"vllm"} and set(vllm.method) == {"eagle3"}
    for cells in (ref, vllm):
        assert (cells.status == "ok").all()
        assert (cells.greedy_match_rate == 1.0).all()
        assert (cells.al > 1.5).all()
    for cat in ("coding", "writing"):
        assert abs(vllm.al[cat] - ref.al[cat]) <= 0.1, (cat, vllm.al[cat], ref.al[cat])  # equal when measured


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_shipped_head_sampling_preserves_the_target_distribution(temperature, top_p):
    """End to end with the trained pair: N rows with the same history, the EAGLE-3 head samples
    its draft, the exact rule verifies it against the target's logits; the first emitted
    token must follow the target's q (chi-square, alpha 0.001). Accepting every draft (so the
    output follows the head's p) must fail the same test: it shows the test can tell p from q."""
    import numpy as np
    from scipy import stats
    from transformers import AutoTokenizer

    from speedbench import models
    from speedbench.engine.drafting import DraftContext, History
    from speedbench.engine.lean_llama import LeanLlama, LeanWeights
    from speedbench.engine.sampling import logits_to_probs
    from speedbench.engine.speculative import verify

    target = models.load_model("builtin:tiny-target")
    tok = AutoTokenizer.from_pretrained(models.resolve_path("builtin:tiny-target"))
    ids = tok("The river runs past the old mill and", add_special_tokens=False)["input_ids"]
    lean = LeanLlama(LeanWeights(target))
    lean.capture = AUX_LAYERS
    with torch.no_grad():
        lean.reset(1, 64)
        logits = lean.forward(torch.tensor([ids]))[:, -1]  # the target's next-token logits after ids
        feats = lean.captured
    params = SamplingParams(temperature=temperature, top_p=top_p)
    q = logits_to_probs(logits, params)[0]
    n = 6000
    ctx = DraftContext(target, lambda hf, num_layers=None: None, torch.device("cpu"), models.load_model)
    drafter = build_drafter("eagle3", ctx, {"model": "builtin:tiny-eagle3"})
    history = History(n, 64, torch.device("cpu"))
    history.tokens[:, : len(ids)] = torch.tensor(ids)
    history.lens[:] = len(ids)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        drafter.reset(history, 64)
        drafter.observe(feats[:, : len(ids) - 1].expand(n, -1, -1), torch.zeros(n, dtype=torch.long))
        proposal = drafter.propose(history, 1, params, g)
        verdict = verify(proposal, logits[:, None].expand(n, 2, -1), params, g)
    first = torch.where(verdict.n_accepted > 0, proposal.tokens[:, 0], verdict.next_token)

    def pvalue(tokens: torch.Tensor) -> float:
        expected = n * q.double().numpy()
        counts = np.bincount(tokens.numpy(), minlength=len(expected)).astype(float)
        big = expected >= 5  # pool the rare tokens into one bin
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        return stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue

    p = proposal.probs[0, 0]
    assert torch.allclose(proposal.probs[:, 0], p.expand_as(proposal.probs[:, 0]))  # same history, same p
    assert 0.1 < float(verdict.n_accepted.float().mean()) < 0.99  # both branches of the rule are exercised
    assert pvalue(first) > 1e-3
    assert pvalue(proposal.tokens[:, 0]) < 1e-3  # the head's own samples follow p, not q
