"""Exact speculative sampling must reproduce the target distribution q.

The test: a vocabulary of 6 tokens, fixed drafter distribution p and target distribution q,
N = 40,000 speculative steps with D = 1 from a fixed seed; the emitted token's histogram is
compared with q by Pearson's chi-square test at significance 0.001 (a correct sampler fails
it with probability 0.1%; with the fixed seed the outcome is deterministic). A deliberately
wrong rule -- on rejection sample from q instead of the residual max(0, q - p) -- must fail
the very same test.
"""
import numpy as np
import pytest
import torch
from scipy import stats

from speedbench.engine.sampling import SamplingParams, logits_to_probs, sample
from speedbench.engine.speculative import Proposal, Verdict, accept_sampling_probs

ALPHA = 1e-3
N = 40_000
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.05, 0.05])  # drafter
Q = torch.tensor([0.10, 0.30, 0.05, 0.25, 0.20, 0.10])  # target


def wrong_rule(proposal: Proposal, q: torch.Tensor, generator) -> Verdict:
    """Accept with min(1, q/p) but resample from q on rejection (a classic bug)."""
    x = proposal.tokens
    p = proposal.probs
    q_x = q[:, :1].gather(-1, x[..., None]).squeeze(-1)
    p_x = p.gather(-1, x[..., None]).squeeze(-1)
    accepted = (torch.rand(x.shape, generator=generator) * p_x < q_x).long()[:, 0]
    bonus = sample(q[:, 1], generator)
    fresh = sample(q[:, 0], generator)
    return Verdict(accepted, torch.where(accepted.bool(), bonus, fresh))


def emitted_first_tokens(rule, seed: int = 0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    drafts = sample(P.expand(N, -1), g)[:, None]
    proposal = Proposal(drafts, torch.ones(N, dtype=torch.long), P.expand(N, 1, -1).clone())
    q = Q.expand(N, 2, -1).clone()
    verdict = rule(proposal, q, g)
    first = torch.where(verdict.n_accepted > 0, drafts[:, 0], verdict.next_token)
    return np.bincount(first.numpy(), minlength=len(Q))


def chi2_pvalue(counts: np.ndarray) -> float:
    return stats.chisquare(counts, N * Q.numpy()).pvalue


def test_exact_rule_preserves_target_distribution():
    assert chi2_pvalue(emitted_first_tokens(accept_sampling_probs)) > ALPHA


def test_wrong_rule_is_caught_by_the_same_test():
    assert chi2_pvalue(emitted_first_tokens(wrong_rule)) < ALPHA


def test_acceptance_probability_is_overlap_of_p_and_q():
    g = torch.Generator().manual_seed(1)
    drafts = sample(P.expand(N, -1), g)[:, None]
    proposal = Proposal(drafts, torch.ones(N, dtype=torch.long), P.expand(N, 1, -1).clone())
    verdict = accept_sampling_probs(proposal, Q.expand(N, 2, -1).clone(), g)
    expected = torch.minimum(P, Q).sum().item()  # P(accept) = sum_x min(p(x), q(x))
    observed = verdict.n_accepted.float().mean().item()
    assert abs(observed - expected) < 4 * np.sqrt(expected * (1 - expected) / N)


def test_deterministic_proposal_residual_excludes_the_rejected_token():
    # n-gram drafts have p = one-hot: after a rejection the rejected token cannot be emitted
    g = torch.Generator().manual_seed(2)
    drafts = torch.zeros(N, 1, dtype=torch.long)
    verdict = accept_sampling_probs(Proposal(drafts, torch.ones(N, dtype=torch.long)), Q.expand(N, 2, -1).clone(), g)
    rejected = verdict.n_accepted == 0
    assert rejected.any()
    assert (verdict.next_token[rejected] != 0).all()
    first = torch.where(rejected, verdict.next_token, drafts[:, 0])
    assert chi2_pvalue(np.bincount(first.numpy(), minlength=len(Q))) > ALPHA


@pytest.mark.parametrize("top_k,top_p", [(3, 1.0), (0, 0.6)])
def test_filters_apply_identically(top_k, top_p):
    logits = torch.log(Q)[None]
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p))[0]
    kept = (probs > 0).sum().item()
    assert kept == (3 if top_k else 3)  # top-p 0.6 keeps 0.30, 0.25, 0.20 (mass 0.55 < 0.6 before the third)
    assert abs(probs.sum().item() - 1) < 1e-6
