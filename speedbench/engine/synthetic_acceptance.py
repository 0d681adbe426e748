"""Synthetic acceptance: the real draft and verification compute, with the accept decision forced.

For mapping an engine's cost surface (step cost against D, B and AL) independently of how good
a drafter is: the drafter proposes and the target verifies as usual, then the number of
accepted drafts of each row is drawn from a fixed profile instead of compared with the target.
The emitted tokens are the accepted drafts followed by the target's own token at that position,
so the output is NOT the target's output (no losslessness claim; cells are marked synthetic).

The profile is either conditional per-position rates ``rates[k]`` = P(draft k+1 accepted | the
first k accepted) or a mean AL, turned into one constant conditional rate ``alpha`` with
sum_{k=0..D} alpha^k = AL. Two ways to draw (``drafter.synthetic_draw``):

* ``quota`` (default): quota (systematic) draws with seeded tie-breaking, so the measured AL of a
  short run is close to the profile's (the error shrinks like 1/n, not 1/sqrt(n)); consecutive
  draws are negatively correlated (a long count is soon followed by a short one);
* ``independent``: every live row of every step draws its count on its own from P(accepted = k)
  (a seeded generator), as vLLM's synthetic rejection sampler does (one uniform per draft
  position against the conditional rate): no correlation within a request, a batch or a step,
  only the profile's per-position rates. What a synthetic-acceptance benchmark assumes, against
  which the real drafter's correlated acceptance is compared (``metrics.synthetic_vs_real``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

DRAWS = ("quota", "independent")


def alpha_for_al(al: float, depth: int) -> float:
    """The constant conditional rate whose expected AL at depth ``depth`` is ``al`` (bisection)."""
    if depth < 1:
        raise ValueError("synthetic acceptance needs num_speculative_tokens >= 1")
    if not 1.0 <= al <= 1.0 + depth:
        raise ValueError(f"drafter.synthetic_al={al} must lie in [1, 1 + D] = [1, {1 + depth}]")

    def expected(a: float) -> float:
        return sum(a**k for k in range(depth + 1))

    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < al else (lo, mid)
    return (lo + hi) / 2


class SyntheticAcceptance:
    """Draws the accepted count of every row, capped by what the drafter proposed.

    Quota draws (systematic sampling): every draw takes the count k whose share so far lags
    its probability P(accepted = k) the most (ties and the start broken by seeded offsets), so
    after n draws each count's frequency is within 1/n of its probability and the pooled AL of
    a short pass is within about D/n of the profile's. One sequence per session (pass).
    """

    def __init__(self, depth: int, al: float | None = None, rates: Sequence[float] = (), seed: int = 0,
                 draw: str | None = None) -> None:
        draw = draw or "quota"
        if draw not in DRAWS:
            raise ValueError(f"drafter.synthetic_draw={draw!r} is not one of {', '.join(DRAWS)}")
        self.draw_mode = draw
        if (al is None) == (not rates):
            raise ValueError("synthetic acceptance needs exactly one of drafter.synthetic_al or drafter.synthetic_rates")
        if rates:
            if len(rates) != depth or not all(0.0 <= r <= 1.0 for r in rates):
                raise ValueError(f"drafter.synthetic_rates needs {depth} rates in [0, 1], got {list(rates)}")
            cond = [float(r) for r in rates]
        else:
            cond = [alpha_for_al(float(al), depth)] * depth
        survive = [1.0]  # survive[k] = P(accepted >= k)
        for r in cond:
            survive.append(survive[-1] * r)
        self.survive = survive
        self.probs = [survive[k] - (survive[k + 1] if k < depth else 0.0) for k in range(depth + 1)]
        self.depth = depth
        self.expected_al = sum(survive)
        g = torch.Generator().manual_seed(seed)
        self._credit = torch.rand(depth + 1, generator=g, dtype=torch.float64).mul(1e-3).tolist()
        self._generator = g  # independent draws continue the same seeded sequence
        self._cdf = torch.tensor(self.probs, dtype=torch.float64).cumsum(0)

    def reset(self, batch: int) -> None:  # noqa: ARG002 - one sequence over the whole pass
        pass

    def draw(self, n_proposed: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Accepted drafts per row; rows not ``active`` (finished) get 0 and use no draw."""
        live = active.tolist() if active is not None else [True] * n_proposed.shape[0]
        if self.draw_mode == "independent":
            return self._independent(n_proposed, live)
        out = []
        for cap, on in zip(n_proposed.tolist(), live):
            if int(cap) <= 0 or not on:
                out.append(0)
                continue
            for k, p in enumerate(self.probs):
                self._credit[k] += p
            k = max(range(self.depth + 1), key=lambda j: self._credit[j])
            self._credit[k] -= 1.0
            out.append(min(k, int(cap)))
        return torch.tensor(out, dtype=torch.long, device=n_proposed.device)

    def _independent(self, n_proposed: torch.Tensor, live: list[bool]) -> torch.Tensor:
        """One inverse-CDF draw of P(accepted = k) per live row with a proposal (capped by it)."""
        caps = n_proposed.tolist()
        used = [i for i, (cap, on) in enumerate(zip(caps, live)) if int(cap) > 0 and on]
        out = [0] * len(caps)
        if used:
            u = torch.rand(len(used), generator=self._generator, dtype=torch.float64)
            ks = torch.searchsorted(self._cdf, u, right=True).clamp(max=self.depth).tolist()
            for i, k in zip(used, ks):
                out[i] = min(int(k), int(caps[i]))
        return torch.tensor(out, dtype=torch.long, device=n_proposed.device)
