"""``speedbench data validate|build``: subcommands for the main CLI.

The main CLI registers this module in ``speedbench.cli.SUBCOMMANDS`` as ``data``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from .build import add_build_args, run_build
from .validate_cmd import add_validate_args, run_validate

COMMANDS = {"validate": run_validate, "build": run_build}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """``speedbench data ...``: register the dataset tools under ``parser``."""
    add_subcommands(parser.add_subparsers(dest="data_command", required=True))


def add_subcommands(subparsers: Any) -> None:
    """Register ``validate`` and ``build`` on an argparse subparsers object."""
    validate = subparsers.add_parser("validate", help="check dataset files before running anything")
    add_validate_args(validate)
    validate.set_defaults(data_command="validate")
    build = subparsers.add_parser("build", help="build exact-length throughput splits for a tokenizer")
    add_build_args(build)
    build.set_defaults(data_command="build")


def main(args: argparse.Namespace) -> int:
    """Run the subcommand selected by ``add_cli_args``; returns the exit status."""
    return COMMANDS[args.data_command](args)


def build_parser() -> argparse.ArgumentParser:
    """A stand-alone parser: ``python -m speedbench.data.cli validate|build ...``."""
    parser = argparse.ArgumentParser(prog="python -m speedbench.data.cli", description="speedbench dataset tools")
    add_cli_args(parser)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(run())
