"""The speculative step (engine.decode.speculative_step) on its own: draft, verify, accept, roll back.

One step on a real lean target: a drafter that is the target itself has all K drafts accepted and
emits K + 1 tokens; a drafter that is always wrong has none accepted, emits the target's own token,
and the cache is rolled back to the history (so the next step continues exactly as plain decoding);
a row that is not active emits nothing.
"""
import pytest
import torch

from speedbench.drafters.draft_model import DraftModelDrafter
from speedbench.drafters.none import NoDrafter
from speedbench.engine.decode import _prefill, generate, speculative_step
from speedbench.engine.drafting import DraftContext
from speedbench.engine.lean_llama import LeanLlama, LeanWeights
from speedbench.engine.sampling import SamplingParams
from speedbench.engine.speculative import Proposal

GREEDY = SamplingParams(0.0, 1.0, 0, 0)
PROMPTS = [list(range(5, 17)), [7, 8, 9]]
K = 3


class Wrong(DraftModelDrafter):
    """The target's own drafts, each shifted by one token: never accepted."""

    def propose(self, history, num_tokens, params, generator):
        p = super().propose(history, num_tokens, params, generator)
        return Proposal(tokens=(p.tokens + 1) % 200, n_proposed=p.n_proposed, probs=p.probs)


@pytest.fixture(scope="module")
def context(tiny_target):
    weights = LeanWeights(tiny_target)
    return weights, DraftContext(tiny_target, lambda hf, num_layers=None: LeanLlama(weights, num_layers),
                                 torch.device("cpu"), lambda path: tiny_target)


def _one_step(context, clock, drafter_class, active):
    weights, ctx = context
    target, drafter = LeanLlama(weights), drafter_class(ctx, model="self")
    history, first = _prefill(target, drafter, PROMPTS, 40, GREEDY, None)
    step = speculative_step(target, drafter, history, K, torch.tensor(active), GREEDY, None, clock)
    return target, history, first, step


def _plain(context, clock, n):
    weights, ctx = context
    return generate(LeanLlama(weights), NoDrafter(ctx), PROMPTS, 0, n, GREEDY, set(), clock).outputs


def test_self_drafts_are_all_accepted(context, clock):
    target, history, first, step = _one_step(context, clock, DraftModelDrafter, [True, True])
    assert step.drafted == [K, K] and step.accepted == [K, K] and step.width == K
    assert [[f] + e for f, e in zip(first, step.emitted)] == _plain(context, clock, K + 2)
    assert target.lens.tolist() == (history.lens - 1).tolist()  # the cache holds all but the newest token
    assert step.t_drafted <= step.t_verified <= step.t_accepted


def test_wrong_drafts_are_rejected_and_rolled_back(context, clock):
    target, history, first, step = _one_step(context, clock, Wrong, [True, False])
    assert step.accepted == [0, 0]
    assert step.emitted[1] == []  # not active: rides along in the forward, emits nothing
    assert [first[0]] + step.emitted[0] == _plain(context, clock, 2)[0]  # the target's own token
    assert history.lens.tolist() == [len(PROMPTS[0]) + 2, len(PROMPTS[1]) + 1]
    assert target.lens.tolist() == (history.lens - 1).tolist()  # the K rejected positions are gone
