"""``speedbench round``: one draft-and-verify round, accounted for step by step.

docs/guidelines.md section 3.3 ("round accounting"). Every input is an assumption the user sets,
not a measurement:

    emitted          = accepted + 1          (the target's correction, or the bonus token
                                              when all D drafts pass: D + 1 tokens)
    draft cost       = D x draft step time   (sequential drafter; one step when parallel)
    round cost       = draft cost + one verification
    comparison cost  = emitted x target step time   (plain decoding of the same tokens)
    speedup          = comparison cost / round cost
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundInputs:
    depth: int  # D, drafts proposed in the round
    t_draft_step_ms: float  # one drafter step
    t_verify_ms: float  # one target forward over 1 + D tokens
    t_target_step_ms: float  # one plain decode step of the target
    accepted: int  # drafts accepted before the first rejection (0..D)
    parallel: bool = False  # a parallel drafter (DFlash-style) proposes all D in one step

    def __post_init__(self) -> None:
        if self.depth < 0:
            raise ValueError(f"D must be >= 0, got {self.depth}")
        if not 0 <= self.accepted <= self.depth:
            raise ValueError(f"accepted must be in [0, D={self.depth}], got {self.accepted}")
        for name, option in (("t_draft_step_ms", "--draft-ms"), ("t_verify_ms", "--verify-ms"), ("t_target_step_ms", "--target-ms")):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{option} {value:g}: a time in ms must be a finite number >= 0")
        if self.draft_steps * self.t_draft_step_ms + self.t_verify_ms <= 0:
            raise ValueError("the round costs 0 ms (no draft time, --verify-ms 0): the speedup cannot be computed")

    @property
    def draft_steps(self) -> int:
        """Sequential draft steps in the round: D, or one for a parallel drafter (none when D = 0)."""
        return (1 if self.depth else 0) if self.parallel else self.depth


@dataclass(frozen=True)
class RoundResult:
    emitted: int
    bonus: bool  # all D drafts accepted: the target's extra token is a bonus, not a correction
    draft_cost_ms: float
    round_cost_ms: float
    comparison_cost_ms: float
    speedup: float


def account(x: RoundInputs) -> RoundResult:
    """The round's numbers; ValueError when one of them is not a finite float (inputs too large to compute)."""
    emitted = x.accepted + 1
    draft = x.draft_steps * x.t_draft_step_ms
    round_cost = draft + x.t_verify_ms
    comparison = emitted * x.t_target_step_ms
    speedup = comparison / round_cost
    costs = {"draft cost": draft, "round cost": round_cost, "comparison cost": comparison, "speedup": speedup}
    overflowed = [name for name, value in costs.items() if not math.isfinite(value)]
    if overflowed:  # never "infx" or "nanx": a number too large for a float is not an answer
        raise ValueError(f"the {overflowed[0]} overflows a float with these inputs (-D {x.depth}, --draft-ms "
                         f"{x.t_draft_step_ms:g}, --verify-ms {x.t_verify_ms:g}, --target-ms {x.t_target_step_ms:g}, "
                         f"--accepted {x.accepted}): use smaller numbers")
    return RoundResult(emitted, x.depth > 0 and x.accepted == x.depth, draft, round_cost, comparison, speedup)


def explain(x: RoundInputs, r: RoundResult) -> str:
    last = "a bonus token (all D drafts passed)" if r.bonus else "1 correction token from the target"
    drafting = (
        f"1 parallel draft step x {x.t_draft_step_ms:g} ms" if x.parallel and x.depth
        else f"{x.depth} draft steps x {x.t_draft_step_ms:g} ms"
    )
    verdict = "speculation pays" if r.speedup > 1 else "speculation does NOT pay"  # account(): a finite speedup
    return "\n".join([
        f"Round with D = {x.depth} drafts, {x.accepted} accepted before the first rejection:",
        f"  emitted tokens   = {x.accepted} accepted + {last} = {r.emitted}",
        f"  draft cost       = {drafting} = {r.draft_cost_ms:g} ms",
        f"  round cost       = draft {r.draft_cost_ms:g} ms + one verification {x.t_verify_ms:g} ms = {r.round_cost_ms:g} ms",
        f"  comparison cost  = {r.emitted} tokens x target step {x.t_target_step_ms:g} ms = {r.comparison_cost_ms:g} ms"
        " (plain decoding of the same tokens)",
        f"  speedup          = {r.comparison_cost_ms:g} / {r.round_cost_ms:g} = {r.speedup:.2f}x  -> {verdict}",
        "All inputs are assumptions you set, not measurements (docs/guidelines.md section 3.3).",
    ])


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-D", "--depth", type=int, default=4, help="draft length D (default 4)")
    parser.add_argument("--draft-ms", type=float, default=5.0, help="one draft step, ms (default 5)")
    parser.add_argument("--verify-ms", type=float, default=45.0, help="one verification forward, ms (default 45)")
    parser.add_argument("--target-ms", type=float, default=40.0, help="one plain target decode step, ms (default 40)")
    parser.add_argument("--accepted", type=int, default=3, help="drafts accepted before the first rejection (default 3)")
    parser.add_argument("--parallel", action="store_true", help="the drafter proposes all D tokens in one step")


def main(args: argparse.Namespace) -> int:
    try:
        x = RoundInputs(args.depth, args.draft_ms, args.verify_ms, args.target_ms, args.accepted, args.parallel)
        result = account(x)
    except ValueError as exc:
        print(f"speedbench round: {exc}", file=sys.stderr)
        return 2
    print(explain(x, result))
    return 0
