#!/usr/bin/env python3
"""How much of a speedup's run-to-run spread is the machine's speed: reads results folders of one
benchmark (runs of the same settings, e.g. the CI benchmark run again and again) and prints, per run,
the no-speculation step time (the machine's speed on the same forward passes) and the speedup, both
geometric means over the run's measured cells, then the fit of log speedup on log step time across
runs: the elasticity (how many percent the speedup moves per percent of machine speed), the
correlation, and the spread of the speedup before and after taking the machine's speed out.

Expected elasticity: the share of a speculative step that does not get faster with the machine
(the fixed cost of drafting, acceptance and the loop: ``t_draft_ms + t_accept_ms + t_other_ms`` of
``t_step_ms_spec`` for a model-free drafter); printed beside the fit.

    python scripts/speed_vs_speedup.py RUN [RUN ...]
    python scripts/speed_vs_speedup.py /tmp/gate-noise-*/repeat-*     # gate_false_alarms.py's runs
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.results import ResultsStore  # noqa: E402
from speedbench.results.layout import RunFolder  # noqa: E402


def geomean(values) -> float:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan


def run_row(folder: Path) -> dict | None:
    cells = ResultsStore(folder).cells()
    cells = cells[(cells.status == "ok") & ~cells.derived.fillna(False).astype(bool)]
    if cells.empty:
        return None
    fixed = (cells.t_draft_ms + cells.t_accept_ms + cells.t_other_ms) / cells.t_step_ms_spec
    return {"run": str(folder), "step_ms": geomean(cells.t_step_ms_baseline), "speedup": geomean(cells.speedup),
            "fixed_share": float(np.nanmean(fixed))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="results folders of one benchmark's settings")
    args = parser.parse_args(argv)
    bad = [str(p) for p in args.runs if not RunFolder(p).has_cells]
    if bad:
        print(f"speed_vs_speedup: not a results folder (no cells/): {bad[0]}", file=sys.stderr)
        return 2
    rows = [r for r in map(run_row, args.runs) if r]
    print(f"{'run':<60} {'step ms':>8} {'speedup':>8} {'fixed share':>11}")
    for r in rows:
        print(f"{r['run'][-60:]:<60} {r['step_ms']:>8.3f} {r['speedup']:>8.4f} {r['fixed_share']:>11.1%}")
    if len(rows) < 3:
        print("fewer than 3 runs: no fit")
        return 0
    x = np.log([r["step_ms"] for r in rows])
    y = np.log([r["speedup"] for r in rows])
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    corr = float(np.corrcoef(x, y)[0, 1])
    print(f"{len(rows)} runs: step time {math.exp(x.min()):.3f}-{math.exp(x.max()):.3f} ms "
          f"(SD {np.std(x, ddof=1):.1%} in log); speedup SD {np.std(y, ddof=1):.2%} (log)")
    print(f"elasticity d log speedup / d log step = {slope:.3f} (expected from the fixed share: "
          f"{np.mean([r['fixed_share'] for r in rows]):.3f}); correlation {corr:.3f}")
    print(f"speedup SD with the machine's speed taken out: {np.std(resid, ddof=2):.2%} (log)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
