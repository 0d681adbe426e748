"""``speedbench report RESULTS_DIR [RESULTS_DIR ...] [--out DIR]``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results folder(s): runs, or folders of runs (merged)")
    parser.add_argument("--out", default=None, help="output folder (default: RESULTS_DIR/report)")
    parser.add_argument("--hardware", default=None,
                        help="hardware for the modelled shares (default: from provenance; table name, e.g. h200)")
    parser.add_argument("--title", default="speedbench report")
    parser.add_argument("--no-plots", action="store_true", help="tables and text only")


def main(args: argparse.Namespace) -> int:
    from . import build_report
    from .build import ReportWriteError

    out = Path(args.out) if args.out else Path(args.results[0]) / "report"
    try:
        result = build_report(args.results, out, hardware=args.hardware, title=args.title, plots=not args.no_plots)
    except (FileNotFoundError, ReportWriteError) as exc:
        print(f"speedbench report: {exc}", file=sys.stderr)
        return 2
    print(f"report: {result.markdown}\n        {result.html}")
    for png in result.plots:
        print(f"plot:   {png}")
    return 0
