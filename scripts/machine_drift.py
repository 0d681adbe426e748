#!/usr/bin/env python3
"""Does this machine hold the ratio of a draft's step time to its target's over minutes?

A speedup is set by that ratio (docs/guidelines.md, section 3), so a machine on which it drifts
gives different speedups at different times however well a run pairs its passes. This probe
runs, in one process and with the same tensors throughout, one target decode step and then D
draft decode steps (the reference engine's lean path, one compute thread), again and again for
``--seconds``. Each row is the median of ``--reps`` such turns; the windows of ``--window``
seconds show how the ratio (D draft steps / one target step, geometric mean of the rows) and
each model's step time move over the run. No harness is involved: what moves here is the machine.

    python scripts/machine_drift.py                      # 4 minutes, 30-second windows
    python scripts/machine_drift.py --seconds 600 --window 60
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(path: str):
    from speedbench.engine.build import LMBuilder
    from speedbench.models import load_model

    return LMBuilder("lean")(load_model(path))


def row(target, draft, depth: int, reps: int, context: int) -> tuple[float, float]:
    """Median seconds of one target step and of ``depth`` draft steps over ``reps`` turns."""
    import torch

    token = torch.tensor([[5]])
    room = context + 4 * (depth + 1) * 32
    for lm in (target, draft):
        lm.reset(1, room)
        lm.forward(torch.randint(3, 100, (1, context)))
    t_target, t_draft = [], []
    for _ in range(reps):
        a = time.perf_counter()
        target.forward(token).argmax(-1)
        b = time.perf_counter()
        for _ in range(depth):
            draft.forward(token).argmax(-1)
        c = time.perf_counter()
        t_target.append(b - a)
        t_draft.append(c - b)
        if int(draft.lens[0]) + depth >= room:  # back to the prompt's end: the same context range every lap
            target.truncate(target.lens * 0 + context)
            draft.truncate(draft.lens * 0 + context)
    return statistics.median(t_target), statistics.median(t_draft)


def windows(rows: list[tuple[float, float, float]], width: float) -> list[tuple[float, float, float]]:
    """Per window of ``width`` seconds: (ratio geometric mean, median target ms, median draft ms)."""
    out = []
    for w in sorted({int(t // width) for t, _, _ in rows}):
        inside = [(tt, td) for t, tt, td in rows if int(t // width) == w]
        ratio = math.exp(statistics.fmean(math.log(td / tt) for tt, td in inside))
        out.append((ratio, statistics.median(tt for tt, _ in inside) * 1e3, statistics.median(td for _, td in inside) * 1e3))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="how long to probe (default 240)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window (default 30)")
    parser.add_argument("--reps", type=int, default=300, help="turns per row (default 300)")
    parser.add_argument("--depth", type=int, default=4, help="draft steps per turn, D (default 4)")
    parser.add_argument("--context", type=int, default=100, help="prompt tokens before the steps (default 100)")
    parser.add_argument("--target", default="builtin:tiny-target")
    parser.add_argument("--draft", default="builtin:tiny-draft-small")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.window <= 0 or args.reps < 1 or args.depth < 1 or args.context < 1:
        parser.error("--seconds, --window, --reps, --depth and --context must be positive")

    import torch

    torch.set_num_threads(1)
    target, draft = build(args.target), build(args.draft)
    rows: list[tuple[float, float, float]] = []
    with torch.inference_mode():
        row(target, draft, args.depth, max(1, args.reps // 4), args.context)  # warm-up, not kept
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            t = time.perf_counter() - start
            rows.append((t, *row(target, draft, args.depth, args.reps, args.context)))
    found = windows(rows, args.window)
    ratios = [r for r, _, _ in found]
    print(f"{len(rows)} rows of {args.reps} turns in {args.seconds:.0f} s; {len(found)} windows of {args.window:.0f} s")
    print(f"{'window':>8}  {'ratio':>6}  {'target ms':>9}  {f'{args.depth} draft steps ms':>18}")
    for i, (ratio, tt, td) in enumerate(found):
        print(f"{i * args.window:7.0f}s  {ratio:6.3f}  {tt:9.3f}  {td:18.3f}")
    spread = (max(ratios) - min(ratios)) / statistics.median(ratios)
    print(f"ratio across windows: {min(ratios):.3f} to {max(ratios):.3f}, spread {spread:.1%} of the median "
          "(the same tensors in one process: a speedup measured in different windows inherits it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
