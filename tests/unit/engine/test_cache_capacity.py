"""The reference engine's cache holds every position a batch can reach (issue #15).

A row that finishes while another row of its batch is still decoding keeps riding along in
the batched verify forward. With a drafter that is perfect for row 0 and wrong for the other
rows, row 0 finishes early at max_new_tokens + D and then writes 1 + D positions per step
after that: the old capacity (prompt + max_new_tokens + D + 2) overflowed for D >= 3.
"""
import pytest
import torch

from speedbench.engine.drafting import DraftContext
from speedbench.drafters.draft_model import DraftModelDrafter
from speedbench.drafters.none import NoDrafter
from speedbench.engine.decode import generate
from speedbench.engine.lean_llama import LeanLlama, LeanWeights
from speedbench.engine.sampling import SamplingParams
from speedbench.engine.speculative import Proposal

GREEDY = SamplingParams(0.0, 1.0, 0, 0)


class RowZeroOnly(DraftModelDrafter):
    """Drafts with the target itself (always accepted) for row 0, off-by-one tokens elsewhere."""

    def propose(self, history, num_tokens, params, generator):
        p = super().propose(history, num_tokens, params, generator)
        tokens = p.tokens.clone()
        tokens[1:] = (tokens[1:] + 1) % 200
        return Proposal(tokens=tokens, n_proposed=p.n_proposed, probs=p.probs)


@pytest.fixture(scope="module")
def weights(tiny_target):
    return LeanWeights(tiny_target)


@pytest.mark.parametrize("batch", [1, 2, 4])
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 6])
def test_ragged_finish_fits_the_cache_and_stays_lossless(tiny_target, weights, clock, batch, depth):
    ctx = DraftContext(tiny_target, lambda hf, num_layers=None: LeanLlama(weights, num_layers), torch.device("cpu"),
                       lambda path: tiny_target)
    prompts = [list(range(5, 17))] + [[7, 8, 9 + b] for b in range(batch - 1)]  # row 0 is the longest
    # max_new_tokens = 2 + k (1 + D): row 0 reaches max_new_tokens - 1, then emits D + 1 at once
    for max_new in sorted({2 + k * (1 + depth) for k in (1,)} | {16}):
        spec = generate(LeanLlama(weights), RowZeroOnly(ctx, model="self"), prompts, depth, max_new, GREEDY, set(), clock)
        plain = generate(LeanLlama(weights), NoDrafter(ctx), prompts, 0, max_new, GREEDY, set(), clock)
        assert spec.outputs == plain.outputs
        assert all(len(o) == max_new for o in spec.outputs)


@pytest.mark.slow
def test_the_readme_sweep_cell_d4_b4_runs(tmp_path):
    """`speedbench run sweep=d_by_b -m` failed its D=4, B=4 cell (16 new tokens): the cache was one short."""
    from speedbench.drafters.registry import make_drafter
    from speedbench.pipeline import runner
    from tests.support.sweep_helpers import make_run

    run = make_run(tmp_path, "d4b4", categories=("coding", "writing"), max_new_tokens=16, batch_size=4, warmup_batches=0,
                   drafter=make_drafter("draft_model", 4, name="tiny_draft_small", model="builtin:tiny-draft-small"))
    run.target.path = "builtin:tiny-target"
    run.dataset.n_requests = 8
    cells = runner.run_cells(run, progress=False)
    assert cells and all(c.status == "ok" for c in cells), [c.error for c in cells]
    assert all(c.batch_size_run == 4 for c in cells)
