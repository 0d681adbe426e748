#!/usr/bin/env python3
"""Rerun a benchmark N times and print how well it reproduces.

Each rerun is ``speedbench run`` in a fresh process (the default run unless overrides say
otherwise), into its own run folder. Over the measured cells (derived ``all`` rows left out)
it prints:

* per-cell CV: standard deviation / mean of a cell's speedup across the reruns (ddof=1),
  median and max over the cells;
* the geometric mean of the speedups per rerun, and their spread: (max - min) / median;
* interval coverage: the share of (cell, rerun) pairs whose 95% interval holds the mean of
  that cell's speedups over the *other* reruns;
* the per-process component: the median over cells of the rerun-to-rerun variance of log speedup
  minus the cells' own noise variance (noise half-width / 1.96, squared), as a relative SD: what
  no single run sees (``protocol.process_noise`` widens the intervals by it);
* the stable share (cells with ``stable`` true) per rerun, and each rerun's wall time;
* with ``--backend-noise``: the median of the cells' own noise estimate (``speedup_noise``);
* ``--metric speedup_throughput`` (or ``speedup_goodput``): the same figures for that speedup;
* for load points: where each drafter stops paying in each rerun (the report's rule), and
  whether the reruns agree.

``--compete`` runs one CPU-bound process (a Python busy loop) beside every rerun, the
contention a shared machine or CI runner adds; ``--compete memory`` runs one that streams through
64 MiB (more than this kind of machine's last-level cache) instead: a neighbour that evicts the
models' weights from the shared cache, which no CPU-time or load figure shows. Examples:

    python scripts/default_reruns.py --reruns 3
    python scripts/default_reruns.py --reruns 3 --compete
    python scripts/default_reruns.py --reruns 3 --compete memory
    python scripts/default_reruns.py --reruns 3 -- backend=vllm dataset=mini
    python scripts/default_reruns.py --reruns 3 -- -m backend=vllm dataset=mini per_category=false \
        drafter=ngram,tiny_draft_small load.concurrency=1,2,4,8 load.num_requests=16 protocol.budget_s=20
    python scripts/default_reruns.py --reuse OUT_DIR      # folders already there
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HOGS = {  # what --compete runs beside every rerun
    "cpu": "import time\nwhile True:\n    sum(i * i for i in range(10000))\n",
    "memory": "import numpy as np\na = np.ones(64 * 1024 * 1024 // 8)\nwhile True:\n    a += 1.0\n",
}


def rerun(out: Path, i: int, overrides: list[str], compete: str | None) -> tuple[Path, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "speedbench.cli", "run", f"results_dir={out}", f"run_id=rerun-{i}",
           "hydra/job_logging=disabled", *overrides]
    hog = subprocess.Popen([sys.executable, "-c", HOGS[compete]]) if compete else None
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    wall = time.perf_counter() - t0
    (out / f"rerun-{i}" / "rerun_wall_s.json").write_text(json.dumps({"wall_s": wall, "compete": compete}))
    return out / f"rerun-{i}", wall


def measured_cells(folder: Path):
    from speedbench.results import ResultsStore

    cells = ResultsStore(folder).cells()
    if "derived" in cells:
        cells = cells[~cells["derived"].astype(bool)]
    return cells[cells["status"] == "ok"]


def stops_paying(folder: Path) -> dict[str, str]:
    """Where each drafter stops paying in one rerun's load points (the report's rule; {} without load points)."""
    from speedbench.report.under_load import _paths, load_points, stops_paying as rule

    cells = measured_cells(folder)
    out = {}
    for axis, points in zip(("concurrency", "request_rate"), load_points(cells)):
        if points.empty:
            continue
        for (mech, d), grp in _paths(points).groupby(["drafter", "num_speculative_tokens"]):
            out[f"{mech} D={d} by {axis}"] = rule(grp, axis).split(" [")[0]
    return out


def figures(folders: list[Path], walls: list[float], metric: str = "speedup") -> dict:
    import numpy as np

    tables = [measured_cells(f).set_index("cell_id") for f in folders]
    common = sorted(set.intersection(*(set(t.index) for t in tables)))
    if not common:
        raise SystemExit("the reruns share no measured cell")
    speed = np.array([[float(t.loc[c, metric]) for c in common] for t in tables])  # reruns x cells
    cv = speed.std(axis=0, ddof=1) / speed.mean(axis=0)
    geo = np.exp(np.log(speed).mean(axis=1))
    covered, total = 0, 0
    for r, t in enumerate(tables):
        others = np.delete(speed, r, axis=0).mean(axis=0)
        for j, c in enumerate(common):
            lo, hi = float(t.loc[c, f"{metric}_ci_low"]), float(t.loc[c, f"{metric}_ci_high"])
            if math.isfinite(lo) and math.isfinite(hi):
                total += 1
                covered += lo <= others[j] <= hi
    # The per-process component: the rerun-to-rerun variance of log speedup beyond what the cells'
    # own noise (a 95% half-width with the prompts fixed, so SD ~ half-width / 1.96) accounts for.
    within = np.array([[float(t.loc[c, "speedup_noise"]) / 1.96 for c in common] for t in tables]) ** 2
    between = np.log(speed).var(axis=0, ddof=1)
    process = float(math.sqrt(max(0.0, float(np.nanmedian(between - np.nanmean(within, axis=0))))))
    stable = [float(t.loc[common, "stable"].astype(bool).mean()) for t in tables]
    noise = [float(np.nanmedian(t.loc[common, "speedup_noise"].astype(float))) for t in tables]
    return {
        "cells": len(common), "reruns": len(tables),
        "cv_median": float(np.median(cv)), "cv_max": float(cv.max()),
        "geomean": [float(g) for g in geo], "geomean_spread": float((geo.max() - geo.min()) / np.median(geo)),
        "coverage": covered / total if total else math.nan, "coverage_pairs": total, "process_component": process,
        "stable_share": stable, "cell_noise_median": noise, "wall_s": walls, "metric": metric,
        "stops_paying": [stops_paying(f) for f in folders],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="folder for the run folders (default: a temp dir)")
    parser.add_argument("--reuse", type=Path, default=None, help="read rerun-* folders already in this folder")
    parser.add_argument("--compete", nargs="?", const="cpu", default=None, choices=sorted(HOGS),
                        help="one competing process beside every rerun: cpu (a busy loop; the default) or memory "
                             "(streams through 64 MiB)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--metric", default="speedup", choices=("speedup", "speedup_throughput", "speedup_goodput"),
                        help="which speedup the figures are of (default: speedup, of TPOT)")
    parser.add_argument("overrides", nargs="*", help="speedbench run overrides (after --)")
    args = parser.parse_args(argv)
    if args.reuse is not None:
        folders = sorted(p for p in args.reuse.glob("rerun-*") if p.is_dir())
        walls = [json.loads((p / "rerun_wall_s.json").read_text())["wall_s"] if (p / "rerun_wall_s.json").exists()
                 else math.nan for p in folders]
    else:
        if args.reruns < 2:
            parser.error("--reruns must be >= 2 (a CV needs two reruns)")
        out = args.out or Path(tempfile.mkdtemp(prefix="speedbench-reruns-"))
        folders, walls = [], []
        for i in range(args.reruns):
            folder, wall = rerun(out, i, args.overrides, args.compete)
            folders.append(folder)
            walls.append(wall)
            print(f"rerun {i + 1}/{args.reruns}: {wall:.1f} s", file=sys.stderr)
    f = figures(folders, walls, args.metric)
    beside = f" (one competing {args.compete}-bound process)" if args.compete else ""
    print(f"{f['reruns']} reruns, {f['cells']} cells{beside}")
    print(f"per-cell CV of the {args.metric}: median {f['cv_median']:.1%}, max {f['cv_max']:.1%}")
    print("geometric means: " + ", ".join(f"{g:.3f}" for g in f["geomean"]) + f"; spread {f['geomean_spread']:.1%}")
    print(f"interval coverage: {f['coverage']:.2f} of {f['coverage_pairs']} (cell, rerun) pairs")
    print(f"per-process component (rerun-to-rerun SD beyond the cells' own noise, median over cells): "
          f"{f['process_component']:.1%}; set protocol.process_noise to it to widen the intervals by it")
    print("stable share: " + ", ".join(f"{s:.0%}" for s in f["stable_share"])
          + "; median cell noise: " + ", ".join(f"{n:.1%}" for n in f["cell_noise_median"]))
    print("wall time: " + ", ".join(f"{w:.1f} s" for w in f["wall_s"]) + f" (median {statistics.median(f['wall_s']):.1f} s)")
    for key in sorted({k for run in f["stops_paying"] for k in run}):
        said = [run.get(key, "-") for run in f["stops_paying"]]
        print(f"{key}: " + " | ".join(said) + ("  (the same in every rerun)" if len(set(said)) == 1 else "  (reruns differ)"))
    if args.json:
        args.json.write_text(json.dumps(f, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
