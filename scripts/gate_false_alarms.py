#!/usr/bin/env python3
"""Measure the regression gate's false-alarm rate on repeated identical runs.

Runs the CI benchmark (conf/experiment/ci_gate.yaml) N times, each in a fresh process,
then gates every ordered pair (i as baseline, j as current, i != j). Nothing changed
between the runs, so every failing pair is a false alarm. Prints the rate per pair and per
check and the spread of the ratios, to size a tolerance from the measured noise:

    python scripts/gate_false_alarms.py --repeats 5 --config ci
    python scripts/gate_false_alarms.py --reuse /tmp/noise --config default   # runs already there

With ``--slowdown 0.10 --slowed 10`` it also measures detection: 10 runs whose drafter is
slowed (``faults.delay_ms``) by enough to cost 10% of the speedup, each gated against every
identical run; a slowed pair that passes is a missed regression. The delay is sized in two
steps. First from the first identical run's own step time: speedup' = (1 - f) speedup needs
each speculative step to take T_step * f / (1 - f) longer. That guess overshoots (a 0.35 ms
spin before each verification cost about 11-11.5% instead of 10% here; the slowed runs'
verification times rose too, a cause not isolated), so one calibration run (``calib<pct>-0``, not counted) measures the loss the
guess causes (1 - the median pooled speedup ratio against the identical runs) and the delay is
rescaled so that its odds f / (1 - f) match. The slowed runs' median pooled ratio is printed:
it should be about 1 - f.

Each rate is also printed for ``scripts/gate-ci.sh``'s sequential rule: a failing pair counts only
when a second pair, disjoint from it (another reference run and another current run), fails too;
the rate is over every such (pair, confirming pair) combination.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.gate.core import BAD, load_config, run_gate  # noqa: E402
from speedbench.results.layout import RunFolder  # noqa: E402


def run_benchmarks(out: Path, repeats: int, extra: list[str], prefix: str = "repeat") -> list[Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    runs = []
    for i in range(repeats):
        cmd = [sys.executable, "-m", "speedbench.cli", "run", "+experiment=ci_gate", f"results_dir={out}",
               f"run_id={prefix}-{i}", "hydra/job_logging=disabled", *extra]
        subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
        runs.append(out / f"{prefix}-{i}")
        print(f"{prefix} run {i + 1}/{repeats} done", file=sys.stderr)
    return runs


def delay_for(run: Path, frac: float) -> float:
    """faults.delay_ms that costs ``frac`` of the speedup, from the run's own speculative step time."""
    from speedbench.results import ResultsStore

    cells = ResultsStore(run).cells()
    return float(cells["t_step_ms_spec"].mean()) * frac / (1.0 - frac)


def pooled_speedup_checks(reports) -> list:
    """The pooled (geometric mean over cells) speedup check of every report."""
    return [c for r in reports for c in r.checks if c.metric == "speedup" and c.cell_id == "ALL"]


def calibrated_delay(out: Path, runs: list[Path], frac: float, cfg, overrides: list[str]) -> float:
    """faults.delay_ms that costs ``frac``: the step-time guess, rescaled by one calibration run's loss."""
    guess = delay_for(runs[0], frac)
    name = f"calib{int(round(frac * 100))}"
    have = sorted(p for p in out.iterdir() if p.name.startswith(name + "-") and RunFolder(p).has_cells)
    calib = have or run_benchmarks(out, 1, [*overrides, f"faults.delay_ms={guess:.4f}"], name)
    _, reports = gate_pairs([(b, calib[0]) for b in runs], cfg)
    got = 1.0 - statistics.median(c.ratio for c in pooled_speedup_checks(reports))
    if not 0.0 < got < 1.0:
        print(f"slowdown {frac:.0%}: the calibration run lost {got:.1%}; keeping the step-time guess", file=sys.stderr)
        return guess
    delay = guess * (frac / (1.0 - frac)) / (got / (1.0 - got))
    print(f"slowdown {frac:.0%}: faults.delay_ms={guess:.3f} (step-time guess) cost {got:.1%} in a calibration run; "
          f"rescaled to {delay:.3f}", file=sys.stderr)
    return delay


def gate_pairs(pairs, cfg) -> tuple[int, list]:
    failed, reports = 0, []
    for base, cur in pairs:
        report = run_gate(base, cur, cfg)
        failed += report.exit_code != 0
        reports.append(report)
    return failed, reports


def confirmed(fails: dict[tuple[Path, Path], bool]) -> tuple[int, int]:
    """(combinations where a pair and a disjoint confirming pair both failed, combinations): gate-ci.sh's rule."""
    combos = [(p, q) for p in fails for q in fails if p[0] != q[0] and p[1] != q[1] and not set(p) & set(q)]
    return sum(fails[p] and fails[q] for p, q in combos), len(combos)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--config", default="ci", help="gate config (path or name in conf/gate/)")
    parser.add_argument("--reuse", type=Path, default=None, help="gate the results folders already in this folder")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a new temporary folder)")
    parser.add_argument("--slowdown", type=float, action="append", default=[],
                        help="speedup loss to inject (e.g. 0.10); repeatable")
    parser.add_argument("--slowed", type=int, default=5, help="slowed runs per --slowdown")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the benchmark runs")
    args = parser.parse_args()
    if args.reuse:
        out = args.reuse
        runs = sorted(p for p in args.reuse.iterdir() if RunFolder(p).has_cells and p.name.startswith("repeat-"))
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="gate-noise-"))
        out.mkdir(parents=True, exist_ok=True)
        runs = run_benchmarks(out, args.repeats, args.overrides)
    cfg = load_config(args.config)
    slowed = {}
    for frac in args.slowdown:
        name = f"slowed{int(round(frac * 100))}"
        have = sorted(p for p in out.iterdir() if p.name.startswith(name + "-") and RunFolder(p).has_cells)
        if not have:
            delay = calibrated_delay(out, runs, frac, cfg, args.overrides)
            have = run_benchmarks(out, args.slowed, [*args.overrides, f"faults.delay_ms={delay:.4f}"], name)
        slowed[frac] = have
    pairs = list(itertools.permutations(runs, 2))
    failed_pairs, failed_checks, ratios, fails = 0, Counter(), {}, {}
    for base, cur in pairs:
        report = run_gate(base, cur, cfg)
        bad = [c for c in report.checks if c.verdict in BAD]
        failed_pairs += report.exit_code != 0
        fails[(base, cur)] = report.exit_code != 0
        for c in report.checks:
            ratios.setdefault((c.metric, c.cell_id == "ALL"), []).append((c.ratio, c.low, c.high))
        failed_checks.update(f"{c.metric} {c.label}" for c in bad)
    n_checks = sum(len(v) for v in ratios.values())
    print(f"{len(runs)} runs, {len(pairs)} ordered pairs gated with {args.config}")
    print(f"false alarms: {failed_pairs}/{len(pairs)} pairs ({failed_pairs / len(pairs):.1%}); "
          f"{sum(failed_checks.values())}/{n_checks} checks")
    both, combos = confirmed(fails)
    print(f"false alarms with a confirming pair (gate-ci.sh): {both}/{combos} ({both / max(combos, 1):.1%})")
    for check, n in failed_checks.most_common():
        print(f"  {n:3d}  {check}")
    for (metric, pooled), vals in sorted(ratios.items()):
        lo = min(r for r, _, _ in vals)
        hi_min = min(h for _, _, h in vals)
        print(f"  {metric:8s} {'pooled' if pooled else 'per cell':8s} ratio range [{lo:.3f}, {max(r for r, _, _ in vals):.3f}], "
              f"smallest CI upper bound {hi_min:.3f}")
    for frac, slow_runs in slowed.items():
        pairs = [(b, c) for b in runs for c in slow_runs]
        caught, reports = gate_pairs(pairs, cfg)
        both, combos = confirmed({pair: r.exit_code != 0 for pair, r in zip(pairs, reports)})
        checks = pooled_speedup_checks(reports)
        pooled, highs = [c.ratio for c in checks], [c.high for c in checks]
        print(f"slowdown {frac:.0%}: detected {caught}/{len(pairs)} pairs ({caught / len(pairs):.1%}); pooled speedup "
              f"ratio median {statistics.median(pooled) if pooled else float('nan'):.3f} (aimed at {1 - frac:.3f}), "
              f"range [{min(pooled, default=float('nan')):.3f}, {max(pooled, default=float('nan')):.3f}], "
              f"largest CI upper bound {max(highs, default=float('nan')):.3f}; with a confirming pair (gate-ci.sh): "
              f"{both}/{combos} ({both / max(combos, 1):.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
