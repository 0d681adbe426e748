"""``speedbench export RESULTS --format specdec_bench|inferencex|csv --out PATH`` (docs/interop.md)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_cli_args(p: argparse.ArgumentParser) -> None:
    from .export import WRITERS  # no pandas here: the writers' names only

    p.add_argument("results", nargs="+", help="results folder(s)")
    p.add_argument("--format", required=True, choices=sorted(WRITERS), help="what to write")
    p.add_argument("--out", required=True, help="the folder to write (csv: a folder or a .csv file)")


def main(args: argparse.Namespace) -> int:
    from .export import export

    for path in export(args.results, args.format, Path(args.out)):
        print(path)
    return 0
