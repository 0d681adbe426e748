#!/usr/bin/env python3
"""Measure the regression gate's false-alarm rate on repeated identical runs.

Runs the CI benchmark (conf/experiment/ci_gate.yaml) N times, each in a fresh process,
then gates every ordered pair (i as baseline, j as current, i != j). Nothing changed
between the runs, so every failing pair is a false alarm. Prints the rate per pair and per
check and the spread of the ratios, to size a tolerance from the measured noise:

    python scripts/gate_false_alarms.py --repeats 5 --config ci
    python scripts/gate_false_alarms.py --reuse /tmp/noise --config default   # runs already there
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.gate.core import BAD, load_config, run_gate  # noqa: E402


def run_benchmarks(out: Path, repeats: int, extra: list[str]) -> list[Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    runs = []
    for i in range(repeats):
        cmd = [sys.executable, "-m", "speedbench.cli", "run", "+experiment=ci_gate", f"results_dir={out}",
               f"run_id=repeat-{i}", "hydra/job_logging=disabled", *extra]
        subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
        runs.append(out / f"repeat-{i}")
        print(f"run {i + 1}/{repeats} done", file=sys.stderr)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--config", default="ci", help="gate config (path or name in conf/gate/)")
    parser.add_argument("--reuse", type=Path, default=None, help="gate the results folders already in this folder")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the benchmark runs")
    args = parser.parse_args()
    if args.reuse:
        runs = sorted(p for p in args.reuse.iterdir() if (p / "cells").is_dir())
    else:
        runs = run_benchmarks(Path(tempfile.mkdtemp(prefix="gate-noise-")), args.repeats, args.overrides)
    cfg = load_config(args.config)
    pairs = list(itertools.permutations(runs, 2))
    failed_pairs, failed_checks, ratios = 0, Counter(), {}
    for base, cur in pairs:
        report = run_gate(base, cur, cfg)
        bad = [c for c in report.checks if c.verdict in BAD]
        failed_pairs += report.exit_code != 0
        for c in report.checks:
            ratios.setdefault((c.metric, c.cell_id == "ALL"), []).append((c.ratio, c.low, c.high))
        failed_checks.update(f"{c.metric} {c.label}" for c in bad)
    n_checks = sum(len(v) for v in ratios.values())
    print(f"{len(runs)} runs, {len(pairs)} ordered pairs gated with {args.config}")
    print(f"false alarms: {failed_pairs}/{len(pairs)} pairs ({failed_pairs / len(pairs):.1%}); "
          f"{sum(failed_checks.values())}/{n_checks} checks")
    for check, n in failed_checks.most_common():
        print(f"  {n:3d}  {check}")
    for (metric, pooled), vals in sorted(ratios.items()):
        lo = min(r for r, _, _ in vals)
        hi_min = min(h for _, _, h in vals)
        print(f"  {metric:8s} {'pooled' if pooled else 'per cell':8s} ratio range [{lo:.3f}, {max(r for r, _, _ in vals):.3f}], "
              f"smallest CI upper bound {hi_min:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
