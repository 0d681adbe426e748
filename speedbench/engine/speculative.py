"""Verification: which draft tokens the target accepts, and the token it emits itself.

Notation as in the papers: ``p`` is the drafter's distribution, ``q`` the target's.
For each row the drafter proposed ``n_proposed[b] <= D`` tokens ``x_1..x_D`` (padding
beyond ``n_proposed`` is ignored). The target scored ``[last, x_1..x_D]`` in one forward,
giving ``q[:, i]`` = the target's distribution for the token after input i.

* Greedy: x_i is accepted iff it equals argmax q_{i-1}; the emitted token is argmax q at
  the first rejection (a correction) or after the last draft (the bonus token).
* Exact speculative sampling: x_i is accepted with probability min(1, q(x_i) / p(x_i));
  at the first rejection the emitted token is drawn from normalise(max(0, q - p)); when all
  proposals pass it is drawn from q (bonus). Output is then distributed exactly as q.

Deterministic proposals (n-gram lookup) have p = one-hot(x_i).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import SamplingParams, logits_to_probs, sample


@dataclass
class Proposal:
    tokens: torch.Tensor  # [B, D] long, padded beyond n_proposed
    n_proposed: torch.Tensor  # [B] long
    probs: torch.Tensor | None = None  # [B, D, V] drafter distribution p; None = one-hot (deterministic)

    @property
    def width(self) -> int:
        return int(self.tokens.shape[1])

    @staticmethod
    def empty(batch: int, device: torch.device) -> "Proposal":
        return Proposal(
            tokens=torch.zeros(batch, 0, dtype=torch.long, device=device),
            n_proposed=torch.zeros(batch, dtype=torch.long, device=device),
        )


@dataclass
class Verdict:
    n_accepted: torch.Tensor  # [B] leading draft tokens accepted
    next_token: torch.Tensor  # [B] the target's own token (correction or bonus)


def _leading_true(flags: torch.Tensor) -> torch.Tensor:
    """Number of leading True values per row of a [B, D] bool tensor."""
    if flags.shape[1] == 0:
        return torch.zeros(flags.shape[0], dtype=torch.long, device=flags.device)
    return flags.long().cumprod(1).sum(1)


def accept_greedy(proposal: Proposal, target_logits: torch.Tensor) -> Verdict:
    target_tokens = target_logits.argmax(-1)  # [B, D+1]
    width = proposal.width
    valid = torch.arange(width, device=target_tokens.device)[None] < proposal.n_proposed[:, None]
    n_acc = _leading_true((proposal.tokens == target_tokens[:, :width]) & valid)
    return Verdict(n_acc, target_tokens.gather(1, n_acc[:, None]).squeeze(1))


def accept_sampling(
    proposal: Proposal,
    target_logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> Verdict:
    q = logits_to_probs(target_logits, params)  # [B, D+1, V]
    return accept_sampling_probs(proposal, q, generator)


def accept_sampling_probs(proposal: Proposal, q: torch.Tensor, generator: torch.Generator | None) -> Verdict:
    """Exact speculative sampling given target probabilities ``q`` [B, D+1, V]."""
    batch, width = proposal.tokens.shape
    device = q.device
    rows = torch.arange(batch, device=device)
    x = proposal.tokens
    if proposal.probs is None:
        p = torch.nn.functional.one_hot(x, q.shape[-1]).float()
    else:
        p = proposal.probs.float()
    q_x = q[:, :width].gather(-1, x[..., None]).squeeze(-1)
    p_x = p.gather(-1, x[..., None]).squeeze(-1)
    r = torch.rand(batch, width, generator=generator, device=device)
    valid = torch.arange(width, device=device)[None] < proposal.n_proposed[:, None]
    n_acc = _leading_true((r * p_x < q_x) & valid)

    q_at = q[rows, n_acc]  # [B, V]
    rejected = n_acc < proposal.n_proposed
    if width > 0:
        p_at = p[rows, n_acc.clamp(max=width - 1)] * rejected[:, None]
        residual = (q_at - p_at).clamp(min=0)
        mass = residual.sum(-1, keepdim=True)
        # mass == 0 only when q == p on the support, where rejection has probability 0
        dist = torch.where(mass > 0, residual / mass.clamp(min=1e-30), q_at)
    else:
        dist = q_at
    return Verdict(n_acc, sample(dist, generator))


def verify(
    proposal: Proposal,
    target_logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> Verdict:
    """The acceptance rule for these sampling settings."""
    if params.greedy:
        return accept_greedy(proposal, target_logits)
    return accept_sampling(proposal, target_logits, params, generator)
