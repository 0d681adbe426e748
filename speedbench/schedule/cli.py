"""``speedbench schedule RESULTS [--out FILE] [--drafter NAME] [--by batch|context|batch,context] [--context-bucket B]
[--cap N] [--extrapolate] [--decide-unstable] [--verify]``.

A load point that decides nothing (no D beats no speculation and some D's interval reaches 1, or a cell is
unstable) is ``undecided``, never K=0, with the budget that would decide it (``pick.decide_budget``); while a
range is undecided the schedule is written (the table, the ranges with ``"undecided"``) but not as a deployable
vLLM setting: ``num_speculative_tokens_per_batch_size`` is null and no ``--speculative-config`` line is printed.

``--by batch`` (default): K per load (the cells' dataset context bucket: ``--context-bucket``). ``--by context``
(= ``batch,context``): K per load and live-context bucket from each cell's ``extra.by_context``; one vLLM
schedule per bucket and the reference engine's (batch, context) schedule (``schedule.by_context``).

Exit status: 0 written (or no verified point whose interval lies apart from the best static D's),
1 a verified point flagged, 2 the results cannot give a schedule (one line saying why: no
drafter, no load point with a measured, finite interval, ...).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from .pick import DEFAULT_CAP

BY = ("batch", "context", "batch,context")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results folder(s) of a sweep over load x D (merged)")
    parser.add_argument("--out", default=None, help="write the JSON here (default: RESULTS/schedule.json)")
    parser.add_argument("--drafter", default=None, help="the drafter (cell column drafter) when several ran")
    parser.add_argument("--by", default="batch", choices=BY,
                        help="the axes K varies over: batch (load; default) or context (= batch,context: load x live "
                             "context, one vLLM schedule per context bucket)")
    parser.add_argument("--context-bucket", default=None,
                        help="the context bucket that sets K (default: per load, the smallest K over buckets)")
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP,
                        help=f"end of the last range with --extrapolate (default {DEFAULT_CAP})")
    parser.add_argument("--extrapolate", action="store_true",
                        help="run the last range to --cap (default: it ends at the largest measured load)")
    parser.add_argument("--decide-unstable", action="store_true",
                        help="decide points whose interval straddles 1 (K=0) or whose cells are unstable as if they "
                             "were measured (default: undecided, not deployable)")
    parser.add_argument("--verify", action="store_true",
                        help="check the cells that ran a schedule against the best static D at each load point")


def _f(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.3g}"


def _iv(ci) -> str:
    return "[" + _f(ci[0]) + ", " + _f(ci[1]) + "]"


def _unstable_lines(points) -> list[str]:
    shaky = [p for p in points if p.unstable]
    return [f"note: {len(shaky)} of {len(points)} of these verdicts rest on unstable cells"] if shaky else []


def main(args: argparse.Namespace) -> int:
    from ..results.load import load
    from .pick import ScheduleError, build, dumps
    from .verify import check_folder

    by_context = getattr(args, "by", "batch") != "batch"
    try:
        data = load(args.results)
        if args.verify:
            points = check_folder(data, args.drafter, by_context)
        elif by_context:
            return _emit_by_context(args, data)
        else:
            sched = build(data, args.drafter, args.context_bucket, args.cap, _decide(args), _extrapolate(args))
    except (FileNotFoundError, ScheduleError) as exc:
        print(f"speedbench schedule: {exc}", file=sys.stderr)
        return 2
    if args.verify:
        print(f"{'load':>6} {'bucket':<10} {'schedule':>8} {'interval':<16} {'best D':>6} {'best':>6} "
              f"{'interval':<16} verdict")
        for p in points:
            print(f"{p.load:>6} {p.context_bucket:<10} {_f(p.speedup):>8} {_iv(p.ci):<16} {p.best_D:>6} "
                  f"{_f(p.best_speedup):>6} {_iv(p.best_ci):<16} {p.verdict}" + (f" ({p.unstable})" if p.unstable else ""))
        flagged = [p for p in points if p.flagged]
        print(f"{len(flagged)} of {len(points)} load points flagged (intervals apart)" if flagged else
              f"no load point flagged: at each of {len(points)} the schedule's interval overlaps the best static D's "
              "or one is not measured (n/a)")
        for line in _unstable_lines(flagged or points):
            print(line)
        return 1 if flagged else 0
    out = _write(args, dumps(sched))
    if out is None:
        return 2
    _print_table(sched, sched.notes())
    ranges = sched.deployable_ranges
    if ranges is None:
        print("ranges:", json.dumps(sched.ranges))
        print("NOT DEPLOYABLE: K undecided at loads " + ", ".join(f"{a}..{b}" for a, b in sched.undecided)
              + " (no vLLM setting written); measure those points at the budget named above, or pass "
              "--decide-unstable to decide from these cells as they are")
        print(f"schedule: {out}")
        return 0
    print("num_speculative_tokens_per_batch_size:", json.dumps(ranges))
    print(f"--speculative-config '{{\"num_speculative_tokens\": {sched.max_k}, "
          f"\"num_speculative_tokens_per_batch_size\": {json.dumps(ranges)}, ...}}' (add method and model)")
    print(f"drafter.num_speculative_tokens={max(1, sched.max_k)} drafter.schedule='{json.dumps(ranges).replace(' ', '')}' "
          "(speedbench run)")
    print(f"schedule: {out}")
    return 0


def _decide(args) -> bool:
    return bool(getattr(args, "decide_unstable", False))


def _extrapolate(args) -> bool:
    return bool(getattr(args, "extrapolate", False))


def _write(args, text: str) -> Path | None:
    from ..results.store import atomic_write_text

    out = Path(args.out) if args.out else Path(args.results[0]) / "schedule.json"
    try:
        atomic_write_text(out, text + "\n")
    except OSError as exc:
        print(f"speedbench schedule: cannot write {out} ({exc.strerror or exc}); --out FILE writes elsewhere",
              file=sys.stderr)
        return None
    return out


def _print_table(sched, notes) -> None:
    print(f"drafter {sched.drafter}; load = {sched.load_column}")
    print(f"{'load':>6} {'bucket':<10} {'K':>9} {'speedup':>8} {'interval':<16} {'of':<4} {'evidence':<30} cells")
    for c in sched.table:  # the chosen K's speedup, or (K=0, undecided) the best measured D's: a number where one was measured
        s, ci, d = c.shown
        of = f"D={d}" if d >= 0 else "-"
        print(f"{c.load:>6} {c.context_bucket:<10} {c.k_label:>9} {_f(s):>8} {_iv(ci):<16} {of:<4} {c.evidence:<30} "
              f"{','.join(c.cells)}")
    for line in notes:
        print(f"note: {line}")


def _emit_by_context(args, data) -> int:
    """``--by context``: the (load, live-context bucket) table, one vLLM schedule per bucket, the engine's plan."""
    from .by_context import build as build_by_context

    sched = build_by_context(data, args.drafter, args.cap, _decide(args), _extrapolate(args))
    out = _write(args, json.dumps(sched.to_json(), indent=2))
    if out is None:
        return 2
    _print_table(sched.base, sched.notes())
    print("(bucket = the live context's lower edge, tokens; speedup and interval: that bucket's steps against the "
          "baseline's steps in the same bucket, percentile bootstrap over target iterations)")
    for edge, ranges in sched.per_bucket.items():
        ok = edge in sched.deployable
        print(f"context >= {edge}: " + (f"num_speculative_tokens_per_batch_size: {json.dumps(ranges)}" if ok else
                                        f"NOT DEPLOYABLE (K undecided): ranges {json.dumps(ranges)}"))
    if sched.plan is None:
        print("no (batch, context) plan: a bucket's K is undecided (measure at the budget named, or --decide-unstable)")
    else:
        plan = json.dumps(sched.plan).replace(" ", "")
        cap = max(1, max((r[2] for _, _, rr in sched.plan for r in rr), default=0))
        print(f"drafter.num_speculative_tokens={cap} drafter.schedule='{plan}' (speedbench run, backend=torch)")
    print(f"schedule: {out}")
    return 0
