"""``speedbench mechanisms RESULTS_DIR [...] [--json]``: the mechanism table of results folders, printed."""
from __future__ import annotations

import argparse
import json
import sys


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", help="results folder(s): runs, or folders of runs (merged)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")


def main(args: argparse.Namespace) -> int:
    from ..results.load import load
    from . import mechanism_table, render

    try:
        data = load(args.results)
    except FileNotFoundError as exc:
        print(f"speedbench mechanisms: {exc}", file=sys.stderr)
        return 2
    sec = mechanism_table.build(data)
    if args.json:
        print(json.dumps(sec.values.get("mechanism_table", []), default=str, indent=1))
    else:
        print(render.markdown("speedbench mechanisms", [], [sec]))
    return 0
