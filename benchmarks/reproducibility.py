#!/usr/bin/env python3
"""Do identical runs agree? Runs the default benchmark N times (each in a fresh process),
optionally N more with a competing CPU-bound process, and reports what issue-level goals ask:

* per-cell speedup CV across the runs (median, max) and the spread of the geometric mean
  over categories ((max - min) / mean);
* coverage: the share of (cell, other run) pairs whose point estimate lies inside this run's
  95% interval;
* |measured / predicted - 1| over stable cells;
* with ``--loaded``: the geometric mean under load against the quiet runs, and which cells the
  protocol flagged unstable;
* the wall time of each run.

    python benchmarks/reproducibility.py --runs 3 --loaded --out /tmp/repro [-- extra overrides]
    python benchmarks/reproducibility.py --reuse /tmp/repro          # analyse runs already there
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.results import ResultsStore  # noqa: E402
from speedbench.results.layout import RunFolder  # noqa: E402


def run(out: Path, run_id: str, extra: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"results_dir={out}", f"run_id={run_id}",
           "hydra/job_logging=disabled", *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def cells(root: Path):
    table = ResultsStore(root).cells()
    return {r["category"]: r for r in table.to_dict("records") if r["status"] == "ok" and not r.get("derived")}


def geomean(values) -> float:
    vals = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


def analyse(quiet: list[Path], loaded: list[Path], walls: dict[str, float]) -> None:
    runs = [cells(r) for r in quiet]
    cats = sorted(set.intersection(*(set(r) for r in runs)))
    cvs = []
    for c in cats:
        vals = [r[c]["speedup"] for r in runs]
        cvs.append(statistics.stdev(vals) / statistics.mean(vals) if len(vals) > 1 else math.nan)
    gms = [geomean(r[c]["speedup"] for c in cats) for r in runs]
    print(f"quiet runs: {len(runs)}, cells per run: {len(cats)}")
    print(f"  per-cell speedup CV across runs: median {statistics.median(cvs):.2%}, max {max(cvs):.2%}")
    print(f"  geometric mean over categories per run: {', '.join(f'{g:.3f}' for g in gms)}; "
          f"spread (max - min) / mean = {(max(gms) - min(gms)) / statistics.mean(gms):.2%}")
    hits = total = 0
    for i, r in enumerate(runs):
        for j, o in enumerate(runs):
            if i == j:
                continue
            for c in cats:
                total += 1
                hits += r[c]["speedup_ci_low"] <= o[c]["speedup"] <= r[c]["speedup_ci_high"]
    print(f"  coverage: {hits}/{total} = {hits / total:.1%} of other runs' point estimates inside a run's 95% interval")
    stable = [r[c] for r in runs for c in cats if r[c].get("stable")]
    errs = [abs(x["speedup"] / x["speedup_predicted"] - 1) for x in stable if x["speedup_predicted"] > 0]
    print(f"  stable cells: {len(stable)}/{len(runs) * len(cats)}; |measured/predicted - 1| over them: "
          f"median {statistics.median(errs):.1%}, max {max(errs):.1%}" if errs else "  no stable cell")
    reps = [r[c]["n_repeats"] for r in runs for c in cats]
    noise = [r[c]["speedup_noise"] for r in runs for c in cats]
    print(f"  repeats per cell: median {statistics.median(reps)}, max {max(reps)}; measurement noise (+-) median "
          f"{statistics.median(noise):.1%}, max {max(noise):.1%}")
    if loaded:
        lruns = [cells(r) for r in loaded]
        q = statistics.mean(gms)
        for k, lr in enumerate(lruns):
            g = geomean(lr[c]["speedup"] for c in cats if c in lr)
            flagged = [c for c in cats if c in lr and not lr[c].get("stable")]
            moved = [c for c in cats if c in lr and abs(lr[c]["speedup"] / statistics.mean(r[c]["speedup"] for r in runs) - 1) > 0.05]
            unflagged_moved = [c for c in moved if c not in flagged]
            print(f"  loaded run {k + 1}: geometric mean {g:.3f} ({g / q - 1:+.1%} vs quiet); cells moved >5%: "
                  f"{len(moved)}, of them not flagged unstable: {unflagged_moved or 'none'}; flagged: {len(flagged)}")
    for name, w in walls.items():
        print(f"  wall {name}: {w:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--loaded", action="store_true", help="also N runs next to a competing CPU-bound process")
    parser.add_argument("--out", type=Path, default=Path("/tmp/speedbench-repro"))
    parser.add_argument("--reuse", type=Path, default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    walls: dict[str, float] = {}
    if args.reuse:
        root = args.reuse
    else:
        root = args.out
        for i in range(args.runs):
            walls[f"quiet-{i}"] = run(root, f"quiet-{i}", args.overrides)
            print(f"quiet run {i + 1} done in {walls[f'quiet-{i}']:.1f} s", file=sys.stderr)
        if args.loaded:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                for i in range(args.runs):
                    walls[f"loaded-{i}"] = run(root, f"loaded-{i}", args.overrides)
                    print(f"loaded run {i + 1} done", file=sys.stderr)
            finally:
                hog.kill()
    quiet = sorted(p for p in root.iterdir() if p.name.startswith("quiet-") and RunFolder(p).has_cells)
    loaded = sorted(p for p in root.iterdir() if p.name.startswith("loaded-") and RunFolder(p).has_cells)
    analyse(quiet, loaded, walls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
