"""``speedbench history DIR``: the command line of the change-point history (see ``gate.history``).

Exit codes: 0 no change beyond the tolerance (or too few runs to look); 1 a change that lost more than
the tolerance with confidence; 2 a folder or run that cannot be read (named), a bad option or config.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from .core import EXIT_CONFIG, GATE_CONF_DIR, GateConfigError, load_config
from .history import CHANGE, INFO, POOLED, REGRESSED, HistoryInputError, HistoryReport, analyse, read_history


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="the history: a folder of gated runs (any depth up to 3), one per commit")
    parser.add_argument("--config", default=str(GATE_CONF_DIR / "default.yaml"),
                        help="gate config (a YAML path or a name in conf/gate/): the metrics, tolerances, per_cell, confidence")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="a loss beyond this fails (exit 1) for every metric (default: each metric's gate tolerance)")
    parser.add_argument("--max-pvalue", type=float, default=0.01,
                        help="a change point is kept when Welch's t-test between its two sides gives p below this (default 0.01)")
    parser.add_argument("--min-size", type=int, default=3, help="at least this many runs on each side of a change (default 3)")
    parser.add_argument("--json", type=Path, default=None, help="write the runs and the changes as JSON here")


def _pct(r: float) -> str:
    return f"{(r - 1) * 100:+.1f}%" if math.isfinite(r) else "n/a"


def format_report(report: HistoryReport) -> str:
    runs = report.runs
    lines = [f"history: {len(runs)} runs, oldest first (commit, time, pooled speedup and AL, no-speculation step)"]
    for n, r in enumerate(runs, 1):
        sp, al = r.values.get(("speedup", POOLED), math.nan), r.values.get(("al", POOLED), math.nan)
        lines.append(f"  {n:3d}  {r.sha[:12]}{'+' if r.dirty else ' '} {r.time}  speedup {sp:.3f}  AL {al:.3f}  "
                     f"step {r.step_ms:.2f} ms  {r.name}")
    if report.too_short:
        lines.append(f"too few runs to look for a change ({len(runs)}; a change needs --min-size runs on each side): "
                     "nothing judged")
        return "\n".join(lines)
    lines.append(f"change points (binary segmentation, Welch t-test on log values p < max_pvalue; size = geometric mean "
                 f"after / before, {report.config.confidence:.0%} Welch interval), in {len(report.series)} series:")
    for c in report.changes:
        run = runs[c.index]
        lines.append(f"  {c.metric:7s} {c.label:18s} began at run {c.index + 1} ({run.sha[:12]}, {run.time}): "
                     f"x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}] ({_pct(c.ratio)}), p={c.pvalue:.2g}; "
                     f"before: runs {c.before[0] + 1}-{c.before[1]} ({c.before[1] - c.before[0]}), "
                     f"after: runs {c.after[0] + 1}-{c.after[1]} ({c.after[1] - c.after[0]})  "
                     f"{c.verdict.upper() if c.verdict not in (CHANGE, INFO) else c.verdict} (tolerance {c.tolerance:g})")
    if not report.changes:
        lines.append("  none")
    bad = [c for c in report.changes if c.verdict == REGRESSED]
    lines.append(f"FAIL: {len(bad)} change(s) lost more than the tolerance with confidence" if bad else
                 "PASS: no change beyond the tolerance")
    return "\n".join(lines)


def to_json(report: HistoryReport) -> dict:
    return {"runs": [{"path": str(r.path), "sha": r.sha, "dirty": r.dirty, "time": r.time, "step_ms": r.step_ms,
                      "values": {f"{m}/{c}": v for (m, c), v in r.values.items()}} for r in report.runs],
            "changes": [{"metric": c.metric, "cell": c.cell, "label": c.label, "run": c.index + 1,
                         "sha": report.runs[c.index].sha, "before": [c.before[0] + 1, c.before[1]],
                         "after": [c.after[0] + 1, c.after[1]], "ratio": c.ratio, "low": c.low, "high": c.high,
                         "pvalue": c.pvalue, "tolerance": c.tolerance, "verdict": c.verdict} for c in report.changes],
            "too_short": report.too_short, "exit_code": report.exit_code}


def main(args: argparse.Namespace) -> int:
    if args.tolerance is not None and not 0 <= args.tolerance < 1:
        print(f"speedbench history: --tolerance must be in [0, 1), got {args.tolerance}", file=sys.stderr)
        return EXIT_CONFIG
    if not 0 < args.max_pvalue < 1 or args.min_size < 2:
        print("speedbench history: --max-pvalue must be in (0, 1) and --min-size at least 2", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = load_config(args.config)
        runs = read_history(args.dir)
    except (GateConfigError, HistoryInputError) as exc:
        print(f"speedbench history: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    report = analyse(runs, cfg, min_size=args.min_size, max_pvalue=args.max_pvalue, tolerance=args.tolerance)
    print(format_report(report))
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(to_json(report), indent=2, allow_nan=True) + "\n")
        except OSError as exc:
            print(f"speedbench history: --json {args.json}: cannot be written ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_CONFIG
    return report.exit_code
