#!/usr/bin/env python3
"""Measure the regression gate's false-alarm rate on repeated identical runs.

Runs the CI benchmark (conf/experiment/ci_gate.yaml) N times, each in a fresh process,
then gates every ordered pair (i as baseline, j as current, i != j). Nothing changed
between the runs, so every failing pair is a false alarm. Prints the rate per pair and per
check and the spread of the ratios, to size a tolerance from the measured noise:

    python scripts/gate_false_alarms.py --repeats 5 --config ci
    python scripts/gate_false_alarms.py --reuse /tmp/noise --config default   # runs already there

With ``--slowdown 0.10 --slowed 10`` it also measures detection: 10 runs whose drafter is
slowed (``faults.delay_ms``) by enough to cost 10% of the pooled speedup, each gated against every
identical run; a slowed pair that passes is a missed regression. The delay is calibrated on the
measured paired loss (``speedbench.gate.slowdown``): probe runs (``calib<pct>-<k>``, not counted)
are each gated against the identical runs, their loss is 1 - the median pooled ratio, and the next
delay comes from a line through the probes' loss odds against their delays, until a probe lands
within half a point of the asked loss. Each slowed run then states the loss it achieved
(``slowdown.json`` in its folder; it moves with the machine: the delay is fixed, the run is not), and
per asked loss the script prints the achieved losses, how many are within 1 point of the asked, and
the detection rate (Wilson 95% interval) single and with the confirming pair. Then the detection
curve: slowed pairs grouped by their run's achieved loss (to the nearest point), the rate and its
Wilson interval per group; and the gate's own "could detect" figure (the median over the identical
pairs of the pooled speedup's ``detectable_loss``: the loss the gate says it catches in 90% of runs)
checked against it: the slowed pairs whose achieved loss is at least that figure must be detected in
at least 90% (met when the Wilson interval lies above 90%, not met below it, else undecided). Pairs that share a run are not independent trials, so the Wilson intervals over pairs
are narrower than the truth; the number of distinct slowed runs is printed beside each.

The detection curve of docs/ci-gate.md (hours on a quiet machine; ``--out`` keeps the runs, and a
second call with ``--reuse`` on that folder gates them again without measuring):

    python scripts/gate_false_alarms.py --repeats 6 --slowed 30 --config ci --out results/detection-curve \
        --slowdown 0.02 --slowdown 0.03 --slowdown 0.05 --slowdown 0.10

Each rate is also printed for ``scripts/gate-ci.sh``'s sequential rule: a failing pair counts only
when a second pair, disjoint from it (another reference run and another current run), fails too;
the rate is over every such (pair, confirming pair) combination.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.gate.core import BAD, DETECT_POWER, load_config, run_gate  # noqa: E402
from speedbench.gate.slowdown import (calibrate, calibration_record, existing_runs, load_calibration,  # noqa: E402
                                      read_slowed_run, record_slowed_run, run_benchmark)
from speedbench.results.layout import RunFolder  # noqa: E402


def run_benchmarks(out: Path, repeats: int, extra: list[str], prefix: str = "repeat") -> list[Path]:
    """``repeats`` runs ``out/PREFIX-<i>`` of the CI benchmark, each in a fresh process; those already there are kept."""
    runs = []
    for i in range(repeats):
        run = out / f"{prefix}-{i}"
        if not RunFolder(run).has_cells:
            run_benchmark(out, run.name, extra, REPO)
            print(f"{prefix} run {i + 1}/{repeats} done", file=sys.stderr)
        runs.append(run)
    return runs


def pooled_speedup_checks(reports) -> list:
    """The pooled (geometric mean over cells) speedup check of every report."""
    return [c for r in reports for c in r.checks if c.metric == "speedup" and c.cell_id == "ALL"]


def calibrated_delay(out: Path, runs: list[Path], frac: float, cfg, overrides: list[str]) -> float:
    """faults.delay_ms that costs ``frac`` of the pooled speedup, measured on probe runs (written to ``out``)."""
    cal = load_calibration(out, frac)
    if cal is None:
        name = f"calib{round(frac * 100)}"

        def probe(k: int, delay: float) -> Path:
            have = existing_runs(out, name)
            return have[k] if k < len(have) else run_benchmark(out, f"{name}-{k}", [*overrides, f"faults.delay_ms={delay:.4f}"], REPO)
        cal = calibrate(frac, runs, cfg, probe)
        calibration_record(out, cal)
    print(f"slowdown {frac:.0%}: {cal.describe()}", file=sys.stderr)
    return cal.delay_ms


def wilson(k: int, n: int) -> str:
    """``k/n (rate, Wilson 95% [low, high])``."""
    from scipy.stats import binomtest

    if n == 0:
        return "0/0"
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{k}/{n} ({k / n:.0%}, Wilson 95% [{ci.low:.0%}, {ci.high:.0%}])"


def achieved(run: Path, asked: float, delay: float | None, runs: list[Path], cfg) -> float:
    """The loss a slowed run achieved against the identical runs (its slowdown.json; measured and written if absent)."""
    rec = read_slowed_run(run)
    if rec is not None and sorted(rec["references"]) == sorted(r.name for r in runs):
        return float(rec["achieved_loss"])
    if delay is None:  # gated again (--reuse) against other identical runs: the delay it was measured with
        delay = float(rec["delay_ms"]) if rec else float("nan")
    return record_slowed_run(run, asked, delay, runs, cfg)


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
        have = existing_runs(out, name)
        delay = None
        if len(have) < args.slowed and not args.reuse:
            delay = calibrated_delay(out, runs, frac, cfg, args.overrides)
            have = run_benchmarks(out, args.slowed, [*args.overrides, f"faults.delay_ms={delay:.4f}"], name)
        slowed[frac] = [(run, achieved(run, frac, delay, runs, cfg)) for run in have]
    pairs = list(itertools.permutations(runs, 2))
    failed_pairs, failed_checks, ratios, fails, identical = 0, Counter(), {}, {}, []
    for base, cur in pairs:
        report = run_gate(base, cur, cfg)
        identical.append(report)
        bad = [c for c in report.checks if c.verdict in BAD]
        failed_pairs += report.exit_code != 0
        fails[(base, cur)] = report.exit_code != 0
        for c in report.checks:
            ratios.setdefault((c.metric, c.cell_id == "ALL"), []).append((c.ratio, c.low, c.high))
        failed_checks.update(f"{c.metric} {c.label}" for c in bad)
    n_checks = sum(len(v) for v in ratios.values())
    print(f"{len(runs)} runs, {len(pairs)} ordered pairs gated with {args.config}")
    print(f"false alarms: {wilson(failed_pairs, len(pairs))} pairs; "
          f"{sum(failed_checks.values())}/{n_checks} checks")
    both, combos = confirmed(fails)
    print(f"false alarms with a confirming pair (gate-ci.sh): {wilson(both, combos)}")
    for check, n in failed_checks.most_common():
        print(f"  {n:3d}  {check}")
    for (metric, pooled), vals in sorted(ratios.items()):
        lo = min(r for r, _, _ in vals)
        hi_min = min(h for _, _, h in vals)
        print(f"  {metric:8s} {'pooled' if pooled else 'per cell':8s} ratio range [{lo:.3f}, {max(r for r, _, _ in vals):.3f}], "
              f"smallest CI upper bound {hi_min:.3f}")
    could = [c.detectable_loss for c in pooled_speedup_checks(identical)]
    could_detect = statistics.median(could) if could else float("nan")
    curve = {}  # achieved loss, rounded to the point -> [(detected single, slowed run)]
    beyond = []  # slowed pairs whose run achieved at least the gate's "could detect" loss: detected?
    for frac, slow_runs in slowed.items():
        pairs = [(b, c) for b in runs for c, _ in slow_runs]
        caught, reports = gate_pairs(pairs, cfg)
        loss_of = dict(slow_runs)
        both, combos = confirmed({pair: r.exit_code != 0 for pair, r in zip(pairs, reports)})
        checks = pooled_speedup_checks(reports)
        pooled, highs = [c.ratio for c in checks], [c.high for c in checks]
        losses = sorted(loss for _, loss in slow_runs)
        near = sum(abs(loss - frac) <= 0.01 for loss in losses)
        print(f"slowdown {frac:.0%}: {len(slow_runs)} slowed runs achieved "
              f"{', '.join(f'{loss:.1%}' for loss in losses)} (median {statistics.median(losses) if losses else float('nan'):.1%}; "
              f"{near}/{len(losses)} within 1 point of {frac:.0%})")
        print(f"  detected {wilson(caught, len(pairs))} pairs; with a confirming pair (gate-ci.sh): {wilson(both, combos)}; "
              f"pooled speedup ratio median {statistics.median(pooled) if pooled else float('nan'):.3f} "
              f"(aimed at {1 - frac:.3f}), range [{min(pooled, default=float('nan')):.3f}, "
              f"{max(pooled, default=float('nan')):.3f}], largest CI upper bound {max(highs, default=float('nan')):.3f}")
        for (base, cur), report in zip(pairs, reports):
            hit = report.exit_code != 0
            curve.setdefault(round(loss_of[cur] * 100), []).append((hit, cur))
            if loss_of[cur] >= could_detect:
                beyond.append((hit, cur))
    if curve:
        print("detection curve (single pairs, by the slowed run's achieved loss):")
        for pct, hits in sorted(curve.items()):
            print(f"  {pct:3d}%: {wilson(sum(h for h, _ in hits), len(hits))} pairs, "
                  f"{len({run for _, run in hits})} distinct slowed runs")
        k, n = sum(h for h, _ in beyond), len(beyond)
        verdict = "not tested (no slowed run achieved that much)"
        if n:
            from scipy.stats import binomtest

            ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
            verdict = ("met (the interval is above 90%)" if ci.low >= DETECT_POWER else
                       "NOT met (the interval is below 90%)" if ci.high < DETECT_POWER else
                       "undecided (the interval holds 90%: more slowed runs)")
        print(f"the gate's \"could detect\" figure (median over identical pairs): {could_detect:.1%} in "
              f"{DETECT_POWER:.0%} of runs; slowed pairs at or beyond it detected {wilson(k, n)}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
