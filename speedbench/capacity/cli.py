"""``speedbench capacity RESULTS [--drafter NAME] [--ttft-ms X] [--tpot-ms X] [--e2e-ms X] [--attainment 0.9] [--out FILE]``.

Exit status: 0 written; 2 the results cannot give a capacity (one line saying why).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .search import DEFAULT_ATTAINMENT


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results folder(s) of a sweep over load.request_rate (or load.concurrency)")
    parser.add_argument("--drafter", default=None, help="only this drafter (cell column drafter)")
    for key in ("ttft", "tpot", "e2e"):
        parser.add_argument(f"--{key}-ms", type=float, default=None,
                            help=f"the {key.upper()} objective in ms (default: the runs' slo.{key}_ms)")
    parser.add_argument("--attainment", type=float, default=DEFAULT_ATTAINMENT,
                        help=f"share of requests that must meet every objective (default {DEFAULT_ATTAINMENT})")
    parser.add_argument("--out", default=None, help="write the JSON here (default: RESULTS/capacity.json)")


def main(args: argparse.Namespace) -> int:
    from ..results.load import load
    from ..results.store import atomic_write_text, strict_json
    from .search import ATTAINMENT_INTERVAL, CapacityError, search

    given = {f"{k}_ms": getattr(args, f"{k}_ms") for k in ("ttft", "tpot", "e2e") if getattr(args, f"{k}_ms") is not None}
    try:
        objectives, rows = search(load(args.results), given, args.attainment, args.drafter)
    except (FileNotFoundError, CapacityError) as exc:
        print(f"speedbench capacity: {exc}", file=sys.stderr)
        return 2
    slo = ", ".join(f"{k} <= {v:g}" for k, v in objectives.items())
    print(f"SLO: {slo}; attainment >= {args.attainment:.0%} of requests")
    print(f"{'drafter':<18} {'D':>2} {'bucket':<8} {'fixed':<16} {'baseline':<40} {'speculative':<40} points")
    for r in rows:
        print(f"{r.drafter:<18} {r.D:>2} {r.context_bucket or '-':<8} {r.fixed or '-':<16} {r.baseline.text(r.unit):<40} "
              f"{r.spec.text(r.unit):<40} {len(r.levels.get('spec', ()))}")
    print(f"attainment per level (share of requests within every objective; {ATTAINMENT_INTERVAL}):")
    for r in rows:
        short = "rate" if r.axis == "request_rate" else "C"
        print(f"  {r.drafter} D={r.D}" + (f" {r.context_bucket}" if r.context_bucket else "")
              + (f" {r.fixed}" if r.fixed else "") + ":")
        for lv in r.attainment_rows():
            print(f"    {short}={lv['load']:<8g} baseline {lv.get('baseline', 'n/a'):<18} "
                  f"(n={lv.get('n_baseline', 0)})  speculative {lv.get('spec', 'n/a'):<18} (n={lv.get('n_spec', 0)})")
    for r in rows:
        print(r.line())
    out = Path(args.out) if args.out else Path(args.results[0]) / "capacity.json"
    body = {"slo": objectives, "attainment": args.attainment, "attainment_interval": ATTAINMENT_INTERVAL,
            "rows": [r.as_dict() for r in rows]}
    try:
        atomic_write_text(out, strict_json(body))
    except (OSError, ValueError) as exc:
        print(f"speedbench capacity: cannot write {out} ({getattr(exc, 'strerror', None) or exc})", file=sys.stderr)
        return 2
    print(f"capacity: {out}")
    return 0
