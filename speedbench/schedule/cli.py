"""``speedbench schedule RESULTS [--out FILE] [--drafter NAME] [--context-bucket B] [--cap N] [--verify]``.

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


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results folder(s) of a sweep over load x D (merged)")
    parser.add_argument("--out", default=None, help="write the JSON here (default: RESULTS/schedule.json)")
    parser.add_argument("--drafter", default=None, help="the drafter (cell column drafter) when several ran")
    parser.add_argument("--context-bucket", default=None,
                        help="the context bucket that sets K (default: per load, the smallest K over buckets)")
    parser.add_argument("--cap", type=int, default=DEFAULT_CAP, help=f"end of the last range (default {DEFAULT_CAP})")
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
    from ..results.store import atomic_write_text
    from .pick import ScheduleError, build, dumps
    from .verify import check_folder

    try:
        data = load(args.results)
        if args.verify:
            points = check_folder(data, args.drafter)
        else:
            sched = build(data, args.drafter, args.context_bucket, args.cap)
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
    out = Path(args.out) if args.out else Path(args.results[0]) / "schedule.json"
    try:
        atomic_write_text(out, dumps(sched) + "\n")
    except OSError as exc:
        print(f"speedbench schedule: cannot write {out} ({exc.strerror or exc}); --out FILE writes elsewhere",
              file=sys.stderr)
        return 2
    print(f"drafter {sched.drafter}; load = {sched.load_column}")
    print(f"{'load':>6} {'bucket':<10} {'K':>3} {'speedup':>8} {'interval':<16} {'evidence':<30} cells")
    for c in sched.table:
        print(f"{c.load:>6} {c.context_bucket:<10} {c.D if c.decided else 'n/a':>3} {_f(c.speedup):>8} "
              f"{_iv(c.ci):<16} {c.evidence:<30} {','.join(c.cells)}")
    for line in sched.notes():
        print(f"note: {line}")
    ranges = sched.ranges
    print("num_speculative_tokens_per_batch_size:", json.dumps(ranges))
    print(f"--speculative-config '{{\"num_speculative_tokens\": {max((r[2] for r in ranges), default=0)}, "
          f"\"num_speculative_tokens_per_batch_size\": {json.dumps(ranges)}, ...}}' (add method and model)")
    cap = max(1, max((r[2] for r in ranges), default=0))
    print(f"drafter.num_speculative_tokens={cap} drafter.schedule='{json.dumps(ranges).replace(' ', '')}' (speedbench run)")
    print(f"schedule: {out}")
    return 0
