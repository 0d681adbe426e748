"""``speedbench gate``: the command line of the regression gate (see ``gate.core``)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

from dataclasses import replace

from .core import EXIT_CONFIG, GATE_CONF_DIR, GateConfigError, GateInputError, load_config, run_gate
from .output import format_report, write_json, write_junit
from ..results.layout import RunFolder
from ..results.store import ResultsReadError, check_folder


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit status: 0 pass, 1 regressed (or a cell failed), 2 bad config or input, 3 cells do not match, "
                     "4 nothing gated, 5 inconclusive (a speedup verdict the runs could not measure: measure both on "
                     "one machine, one after the other; docs/ci-gate.md)")
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline results folder")
    parser.add_argument("--current", type=Path, required=True, help="the results folder to judge")
    parser.add_argument("--config", default=str(GATE_CONF_DIR / "default.yaml"),
                        help="gate config: a YAML path or a name in conf/gate/ (default: default)")
    parser.add_argument("--json", type=Path, default=None, help="write the verdict as JSON here")
    parser.add_argument("--junit", type=Path, default=None, help="write a JUnit XML report here")
    parser.add_argument("--metric", action="append", default=None, metavar="NAME",
                        help="gate only this metric of the config (repeatable; default: every metric it names)")
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
    outputs = _outputs(args)
    for option, (path, _) in outputs.items():  # before the verdict: a gate that cannot write it says so, exit 2
        problem = _unwritable(path)
        if problem:
            print(f"speedbench gate: {option} {path}: cannot be written ({problem})", file=sys.stderr)
            return EXIT_CONFIG
    if getattr(args, "allow_nothing_gated", False):
        cfg = replace(cfg, allow_nothing_gated=True)
    if getattr(args, "metric", None):
        unknown = sorted(set(args.metric) - set(cfg.rules))
        if unknown:
            print(f"speedbench gate: --metric {', '.join(unknown)}: not gated by config {args.config} "
                  f"(it gates {', '.join(sorted(cfg.rules))})", file=sys.stderr)
            return EXIT_CONFIG
        cfg = replace(cfg, rules={name: rule for name, rule in cfg.rules.items() if name in args.metric})
    try:
        report = run_gate(args.baseline, args.current, cfg)
    except GateInputError as exc:
        print(f"speedbench gate: unusable input: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(format_report(report))
    for option, (path, write) in outputs.items():
        try:
            write(report, path)
        except OSError as exc:  # it became unwritable meanwhile: exit 2, never 1 (a regression) for a passing gate
            print(f"speedbench gate: {option} {path}: cannot be written ({exc.strerror or exc}); "
                  "the verdict above was not saved", file=sys.stderr)
            return EXIT_CONFIG
    return report.exit_code


def _outputs(args: argparse.Namespace) -> dict[str, tuple[Path, Callable]]:
    """The report files asked for: option -> (path, writer)."""
    writers = {"--json": (args.json, write_json), "--junit": (args.junit, write_junit)}
    return {option: (Path(path), write) for option, (path, write) in writers.items() if path}


def _unwritable(path: Path) -> str | None:
    """Why a report file could not be written at ``path`` (probed as the write makes it: a temporary file beside it), or None."""
    try:
        if path.is_dir():
            return "it is a directory"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:  # named with the path it concerns when that is not the file (a parent that is a file)
        where = str(exc.filename) if exc.filename and str(exc.filename) != str(path) else ""
        reason = exc.strerror or str(exc)
        return f"{reason}: {where}" if where and len(where) < len(str(path)) else reason
    return None
