"""``speedbench gate``: the command line of the regression gate (see ``gate.core``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dataclasses import replace

from .core import EXIT_CONFIG, GATE_CONF_DIR, GateConfigError, GateInputError, load_config, run_gate
from .output import format_report, write_json, write_junit
from ..results.layout import RunFolder
from ..results.store import ResultsReadError, check_folder


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline results folder")
    parser.add_argument("--current", type=Path, required=True, help="the results folder to judge")
    parser.add_argument("--config", default=str(GATE_CONF_DIR / "default.yaml"),
                        help="gate config: a YAML path or a name in conf/gate/ (default: default)")
    parser.add_argument("--json", type=Path, default=None, help="write the verdict as JSON here")
    parser.add_argument("--junit", type=Path, default=None, help="write a JUnit XML report here")
    parser.add_argument("--allow-nothing-gated", action="store_true",
                        help="exit 0 when no check could be judged (every cell below min_requests); default: exit 4")


def main(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except GateConfigError as exc:
        print(f"speedbench gate: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for name, path in (("--baseline", args.baseline), ("--current", args.current)):
        try:
            check_folder(path)
        except ResultsReadError as exc:
            print(f"speedbench gate: {name} {exc}", file=sys.stderr)
            return EXIT_CONFIG
        if not RunFolder(path).has_cells:
            print(f"speedbench gate: {name} {path} is not a results folder (no cells/)", file=sys.stderr)
            return EXIT_CONFIG
    if getattr(args, "allow_nothing_gated", False):
        cfg = replace(cfg, allow_nothing_gated=True)
    try:
        report = run_gate(args.baseline, args.current, cfg)
    except GateInputError as exc:
        print(f"speedbench gate: unusable input: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(format_report(report))
    if args.json:
        write_json(report, args.json)
    if args.junit:
        write_junit(report, args.junit)
    return report.exit_code
