"""PARD (parallel drafting): the training layout is the inference view, the reference-engine
drafter drafts D tokens in one forward with vLLM's mask layout, stays exact under sampling,
the shipped draft loads everywhere, and engine refusals are one line before anything runs."""
import json

import pytest
import torch

from speedbench.drafters import build_drafter
from speedbench.drafters.registry import METHODS, engine_refusal
from speedbench.engine.decode import generate
from speedbench.engine.drafting import History
from speedbench.engine.sampling import SamplingParams
from speedbench.fixtures import MODELS_DIR, PARD_DRAFT, TARGET, model_path
from speedbench.fixtures.pard import layout

from tests.support.drafting import make_context
from tests.unit.engine.test_lossless import prompts

GREEDY = SamplingParams()


def test_training_layout_equals_the_inference_forward(tiny_draft):
    """Real rows see a plain causal prefix; mask j of anchor a sees exactly [x_0..x_a, mask x j]."""
    x = torch.randint(6, 250, (2, 24), generator=torch.Generator().manual_seed(0))
    anchors, k_max, mask = torch.tensor([2, 9, 15]), 5, 3
    positions, attend, rows = layout(24, anchors, k_max)
    inp = torch.cat([x, torch.full((2, rows.numel()), mask)], 1)
    with torch.no_grad():
        packed = tiny_draft(input_ids=inp, position_ids=positions[None].expand(2, -1),
                            attention_mask=attend[None, None].expand(2, 1, -1, -1)).logits
        assert torch.allclose(packed[:, :24], tiny_draft(input_ids=x).logits, atol=1e-5)
        for i, a in enumerate(anchors.tolist()):
            plain = tiny_draft(input_ids=torch.cat([x[:, : a + 1], torch.full((2, k_max - 1), mask)], 1)).logits
            got = packed[:, 24 + i * (k_max - 1): 24 + (i + 1) * (k_max - 1)]
            assert torch.allclose(got, plain[:, a + 1:], atol=1e-5), a
    assert rows.tolist() == [a + j for a in anchors.tolist() for j in range(1, k_max)]


@pytest.mark.parametrize("impl", ["lean", "hf"])
def test_one_draft_forward_per_step_with_the_bonus_slot_first(tiny_target, tiny_draft, impl):
    ctx = make_context(tiny_target, tiny_draft, impl)
    pard = build_drafter("pard", ctx, {"model": "pard"})
    serial = build_drafter("draft_model", ctx, {"model": "draft"})
    calls = []
    forward = pard.lm.forward
    pard.lm.forward = lambda tokens, logits_at=None: calls.append(tokens.clone()) or forward(tokens, logits_at)
    rows = prompts(3)
    history = History(3, 64, torch.device("cpu"))
    for b, p in enumerate(rows):
        history.tokens[b, : len(p)] = torch.tensor(p)
    history.lens = torch.tensor([len(p) for p in rows])
    with torch.inference_mode():
        pard.reset(history, 64)
        serial.reset(history, 64)
        calls.clear()
        par = pard.propose(history, 4, GREEDY, None)
        ser = serial.propose(history, 4, GREEDY, None)
    assert len(calls) == 1 and calls[0].shape == (3, 1 + 3)  # bonus slot + D-1 masks, one forward
    assert (calls[0][:, 1:] == 0).all()  # the masks are the config's pard_token (0 here)
    assert par.tokens.shape == (3, 4) and (par.n_proposed == 4).all()
    assert torch.equal(par.tokens[:, 0], ser.tokens[:, 0])  # the bonus slot is an ordinary next-token step
    assert torch.equal(pard.lm.lens, history.lens)  # masks cut off again: only real tokens stay cached
    with torch.no_grad():  # the same drafts as one plain forward over prompt + D-1 masks (the training view)
        for b, p in enumerate(rows):
            plain = tiny_draft(input_ids=torch.tensor([p + [0] * 3])).logits[0, len(p) - 1:].argmax(-1)
            assert torch.equal(par.tokens[b], plain), b


def test_a_model_without_pard_token_is_refused_by_name(tiny_target, tiny_draft):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    with pytest.raises(ValueError, match="pard_token"):
        build_drafter("pard", ctx, {"model": "draft"})


def _shipped():
    from speedbench import models

    return models.load_model("builtin:tiny-target"), models.load_model("builtin:tiny-pard")


def test_shipped_pard_draft_loads_and_records_its_training():
    from transformers import AutoModelForCausalLM

    from speedbench.fixtures.manifest import read_manifest

    cfg = json.loads((model_path(PARD_DRAFT) / "config.json").read_text())
    target = json.loads((model_path(TARGET) / "config.json").read_text())
    assert cfg["vocab_size"] == target["vocab_size"] and cfg["head_dim"] == 64
    assert cfg["pard_token"] == target["pad_token_id"]  # reserved: never produced in text
    assert not {"mask_token_id", "dspark_noise_token_id", "dflash_config"} & set(cfg)  # vLLM would read those first
    model = AutoModelForCausalLM.from_pretrained(str(model_path(PARD_DRAFT)), dtype=torch.float32)
    info = read_manifest(MODELS_DIR)["provenance"]["models"][PARD_DRAFT]
    assert info["params"] == sum(p.numel() for p in model.parameters()) and info["k_max"] == 8
    match = info["val_top1_match_per_depth"]
    assert len(match) == 8 and match[0] > 0.5 and match[0] > match[1] > match[-1] > 0.05


def test_shipped_pard_is_lossless_and_accepted_on_the_reference_engine(clock):
    from transformers import AutoTokenizer

    from speedbench.engine.build import LMBuilder
    from speedbench.engine.drafting import DraftContext

    target, pard = _shipped()
    ctx = DraftContext(target, LMBuilder("lean"), torch.device("cpu"), lambda _path: pard)
    tok = AutoTokenizer.from_pretrained(str(model_path(TARGET)))
    rows = [tok("def read_lines(path):\n    with open(path) as f:\n").input_ids,
            tok("The storm had passed, but the river was still rising.").input_ids]
    with torch.inference_mode():
        base = generate(ctx.make_lm(target), build_drafter("none", ctx, {}), rows, 0, 40, GREEDY, set(), clock)
        spec = generate(ctx.make_lm(target), build_drafter("pard", ctx, {"model": "builtin:tiny-pard"}), rows, 4, 40,
                        GREEDY, set(), clock)
    assert spec.outputs == base.outputs
    steps = [s for row in spec.row_steps for s in row]
    assert 1.5 < 1 + sum(s.accepted for s in steps) / len(steps) < 5  # trained: accepted, not perfect


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shipped_pard_sampling_preserves_the_target_distribution_at_depth_two(temperature):
    """PARD's drafts 1 and 2 come from one forward, each from its own p (draft 2 never sees draft 1);
    N rows draw them and the exact rule verifies both against the target's real logits. Among
    rows whose first draft was accepted as token m, the second emitted token must follow
    q(. | history, m) (chi-square, alpha 0.001). Accepting draft 2 always (so it follows PARD's
    own p_2) must fail the same test. Rows share one history, so p and q are computed once."""
    import numpy as np
    from scipy import stats
    from transformers import AutoTokenizer

    from speedbench.engine.build import LMBuilder
    from speedbench.engine.drafting import DraftContext
    from speedbench.engine.sampling import logits_to_probs
    from speedbench.engine.speculative import Proposal, verify

    target, pard = _shipped()
    tok = AutoTokenizer.from_pretrained(str(model_path(TARGET)))
    ids = tok("def read_lines(path):\n    with open(path) as f:\n", add_special_tokens=False)["input_ids"]
    n, params = 5000, SamplingParams(temperature=temperature)
    ctx = DraftContext(target, LMBuilder("lean"), torch.device("cpu"), lambda _path: pard)
    drafter = build_drafter("pard", ctx, {"model": "builtin:tiny-pard"})
    history = History(1, 64, torch.device("cpu"))
    history.tokens[0, : len(ids)] = torch.tensor(ids)
    history.lens[:] = len(ids)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        drafter.reset(history, 64)
        p = drafter.propose(history, 2, params, g).probs[0]  # [2, V]: the drafter's p_1, p_2
        m = int(p[0].argmax())
        after_m = target(input_ids=torch.tensor([ids + [m]])).logits[0, -2:]  # q after ids, q after ids + m
        logits = torch.cat([after_m, after_m[-1:]])[None].expand(n, 3, -1)  # the bonus slot is never read here
        x = torch.stack([torch.multinomial(p[i], n, replacement=True, generator=g) for i in range(2)], 1)
        proposal = Proposal(x, torch.full((n,), 2, dtype=torch.long), p[None].expand(n, 2, -1))
        verdict = verify(proposal, logits, params, g)
    rows = (verdict.n_accepted >= 1) & (x[:, 0] == m)  # only these rows' second token follows q(. | ids, m)
    second = torch.where(verdict.n_accepted[rows] >= 2, x[rows, 1], verdict.next_token[rows])
    q2 = logits_to_probs(after_m[-1], params).double().numpy()

    def pvalue(tokens: torch.Tensor) -> float:
        expected = len(tokens) * q2
        counts = np.bincount(tokens.numpy(), minlength=len(expected)).astype(float)
        big = expected >= 5
        obs, exp = np.append(counts[big], counts[~big].sum()), np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        return stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue

    assert int(rows.sum()) > 1000
    assert 0.05 < float((verdict.n_accepted[rows] >= 2).float().mean()) < 0.95  # both branches exercised
    assert pvalue(second) > 1e-3
    assert pvalue(x[rows, 1]) < 1e-3  # PARD's own depth-2 samples follow p_2, not q


# ---- engine refusals (data, one line, before anything loads) ------------------------------------------------------
def test_refusal_table_rows_name_method_and_reason():
    assert {n for n, m in METHODS.items() if "vllm" in m.refusals} >= {"dspark", "mlp_speculator"}
    assert METHODS["dspark"].refusals["vllm"].cpu_only and not METHODS["mlp_speculator"].refusals["vllm"].cpu_only
    # vllm_serve starts the vllm build: its refusals apply, naming the backend asked for
    assert engine_refusal("vllm_serve", "dspark", on_cpu=True, build="vllm").startswith(
        "drafter.method='dspark' cannot run on backend=vllm_serve: ")
    line = engine_refusal("vllm", "dspark", on_cpu=True)
    assert line.startswith("drafter.method='dspark' cannot run on backend=vllm: ") and "V1" in line
    assert engine_refusal("vllm", "dspark", on_cpu=False) is None  # a CUDA build's V2 runner may run it
    assert "mlp_speculator" in engine_refusal("vllm", "mlp_speculator", on_cpu=False)
    assert engine_refusal("vllm", "pard", on_cpu=True) is None and engine_refusal("torch", "dspark") is None


@pytest.mark.parametrize("method", ["dspark", "mlp_speculator"])
def test_vllm_refuses_what_this_build_cannot_run_in_one_line_before_any_engine_starts(tmp_path, capsys, method):
    pytest.importorskip("vllm")
    from speedbench.backends.vllm.spec import on_cpu
    from speedbench.cli import main

    if method == "dspark" and not on_cpu():
        pytest.skip("dspark is refused on vLLM's CPU build only")
    code = main(["run", "backend=vllm", f"drafter.method={method}", "drafter.model=builtin:tiny-draft-small",
                 "dataset=smoke", f"results_dir={tmp_path}", "run_id=refused"])
    err = capsys.readouterr().err
    ours = [ln for ln in err.splitlines() if ln.startswith("speedbench")]  # vLLM's first import may log a warning
    assert code == 2 and "Traceback" not in err and len(ours) == 1, err
    assert ours[0] == f"speedbench run: {engine_refusal('vllm', method, on_cpu=True)}"
    assert not (tmp_path / "refused").exists()


def test_vllm_speculative_config_for_pard_is_a_parallel_draft_model():
    from speedbench.backends.vllm.spec import speculative_config, speedbench_methods
    from speedbench.drafters.registry import make_drafter

    d = make_drafter("pard", 4, model="builtin:tiny-pard")
    cfg = speculative_config(d)
    assert cfg["method"] == "draft_model" and cfg["parallel_drafting"] is True
    assert cfg["num_speculative_tokens"] == 4 and cfg["model"].endswith("tiny-pard")
    assert "disable_padded_drafter_batch" not in cfg
    assert "pard" in speedbench_methods({"draft_model", "ngram"})  # served by vLLM's draft_model
    assert "pard" not in speedbench_methods({"ngram"})


def test_shipped_pard_runs_a_schedule_losslessly_with_the_scheduled_k(clock):
    """The reference engine's parallel drafter drafts the schedule's K (here 2 of D=4 for 2 live rows), one
    forward per step, and stays lossless (vLLM refuses a schedule for parallel drafting; this engine can)."""
    from transformers import AutoTokenizer

    from speedbench.engine.build import LMBuilder
    from speedbench.engine.drafting import DraftContext

    target, pard = _shipped()
    ctx = DraftContext(target, LMBuilder("lean"), torch.device("cpu"), lambda _path: pard)
    tok = AutoTokenizer.from_pretrained(str(model_path(TARGET)))
    rows = [tok("def read_lines(path):\n    with open(path) as f:\n").input_ids,
            tok("The storm had passed, but the river was still rising.").input_ids]
    schedule = ((1, 2, 2), (3, 64, 4))
    with torch.inference_mode():
        base = generate(ctx.make_lm(target), build_drafter("none", ctx, {}), rows, 0, 24, GREEDY, set(), clock)
        spec = generate(ctx.make_lm(target), build_drafter("pard", ctx, {"model": "builtin:tiny-pard"}), rows, 4, 24,
                        GREEDY, set(), clock, schedule=schedule)
    assert spec.outputs == base.outputs
    steps = [s for row in spec.row_steps for s in row]
    assert max(s.drafted for s in steps) == 2  # never the configured D=4 while both rows run
    assert sum(s.drafted == 2 for s in steps) > len(steps) // 2  # fewer only where the output's end cuts K
