"""Greedy speculative output must equal greedy decoding token for token, for every drafter."""
import pytest
import torch

from speedbench.drafters import build_drafter
from speedbench.engine.decode import generate
from speedbench.engine.sampling import SamplingParams

from tests.support.drafting import make_context

GREEDY = SamplingParams()
DRAFTERS = [
    ("ngram", {"prompt_lookup_min": 1, "prompt_lookup_max": 3}),
    ("draft_model", {"model": "draft"}),
    ("draft_model", {"model": "target"}),  # a perfect drafter: every draft accepted, bonus path
    ("layer_skip", {"num_layers": 2}),
    ("pard", {"model": "pard"}),  # parallel drafting: D drafts from one forward over mask tokens
]


def prompts(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    out = []
    for length in (9, 14, 5, 11)[:n]:
        p = torch.randint(3, 250, (length,), generator=g).tolist()
        out.append(p + p[:4])  # a repeat so that n-gram lookup finds matches
    return out


def run(ctx, method, options, batch, depth, clock, max_new=24):
    drafter = build_drafter(method, ctx, options)
    target = ctx.make_lm(ctx.target_model)
    return generate(target, drafter, prompts(batch), depth, max_new, GREEDY, set(), clock)


@pytest.mark.parametrize("impl", ["lean", "hf"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("method,options", DRAFTERS)
def test_greedy_spec_equals_baseline(tiny_target, tiny_draft, clock, impl, batch, method, options):
    ctx = make_context(tiny_target, tiny_draft, impl)
    with torch.inference_mode():
        base = run(ctx, "none", {}, batch, 0, clock)
        for depth in (1, 4):
            spec = run(ctx, method, options, batch, depth, clock)
            assert spec.outputs == base.outputs, f"{method} D={depth} B={batch} diverged from greedy"
            assert all(len(o) == 24 for o in spec.outputs)


def test_perfect_drafter_accepts_everything(tiny_target, tiny_draft, clock):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    with torch.inference_mode():
        spec = run(ctx, "draft_model", {"model": "target"}, 4, 3, clock, max_new=33)
    steps = [s for row in spec.row_steps for s in row]
    assert all(s.accepted == s.drafted == 3 for s in steps)
    assert len(spec.row_steps[0]) == 8  # 1 prefill token + 8 steps x 4 tokens = 33


def test_lean_and_hf_paths_agree_with_hf_generate(tiny_target, tiny_draft, clock):
    with torch.inference_mode():
        p = prompts(1)[0]
        ref = tiny_target.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                   max_new_tokens=24, do_sample=False, pad_token_id=0)
        expected = ref[0, len(p):].tolist()
        for impl in ("lean", "hf"):
            out = run(make_context(tiny_target, tiny_draft, impl), "none", {}, 1, 0, clock)
            assert out.outputs[0] == expected, impl


def test_stop_token_ends_a_row_early(tiny_target, tiny_draft, clock):
    ctx = make_context(tiny_target, tiny_draft, "lean")
    with torch.inference_mode():
        base = run(ctx, "none", {}, 2, 0, clock)
        stop = base.outputs[0][5]
        drafter = build_drafter("ngram", ctx, {})
        out = generate(ctx.make_lm(tiny_target), drafter, prompts(2), 4, 24, GREEDY, {stop}, clock)
    first = base.outputs[0].index(stop)
    assert out.outputs[0] == base.outputs[0][: first + 1]
