#!/usr/bin/env python3
"""Synthetic against real acceptance, end to end: the real load points, their synthetic twins, the comparison.

1. ``speedbench run +experiment=synthetic_vs_real run_id=RUN`` (the real drafter at C = 1, 2, 4 on
   the reference engine; extra Hydra overrides after ``--`` go to both arms);
2. for every real load-point cell of the run without a twin: the same point again with
   ``drafter.synthetic_rates`` = the real cell's per-position conditional acceptance and
   ``drafter.synthetic_draw=independent`` (every row of every step its own draw), into the same
   run folder: an ordinary paired cell, marked synthetic;
3. prints the comparison (``report.synthetic_vs_real``; ``speedbench report`` shows the same section).

    python scripts/synthetic_vs_real.py --run-id synthetic-vs-real
    python scripts/synthetic_vs_real.py --run-id synthetic-vs-real --twins-only   # real cells already there
    python scripts/synthetic_vs_real.py --run-id svr -- load.concurrency=1,2,4,8 load.num_requests=16

Exit 2 (one line) on a bad option or a run folder without real load-point cells.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from speedbench.metrics.synthetic_vs_real import rates_of, twins
from speedbench.report.synthetic_vs_real import comparison
from speedbench.results.layout import RunFolder
from speedbench.results.store import ResultsStore

EXPERIMENT = "+experiment=synthetic_vs_real"


def speedbench_run(args: list[str]) -> int:
    cmd = [sys.executable, "-m", "speedbench.cli", "run", *args]
    print("+ speedbench run " + " ".join(args), flush=True)
    return subprocess.call(cmd)


def real_cells(store: ResultsStore):
    cells = store.cells()
    if cells.empty or "synthetic_al" not in cells:
        return cells.iloc[0:0] if not cells.empty else cells
    ok = cells[(cells["status"] == "ok") & cells["synthetic_al"].isna()]
    ok = ok[ok["num_speculative_tokens"] > 0]
    return ok[ok["concurrency"].astype(int) >= 1]


def twin_overrides(cell) -> list[str]:
    rates = rates_of(cell)
    return [f"load.concurrency={int(cell['concurrency'])}", f"drafter.synthetic_rates=[{','.join(map(str, rates))}]",
            "drafter.synthetic_draw=independent"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True, help="the run folder's name under --results-dir")
    ap.add_argument("--results-dir", default="results/runs", help="where run folders are (default results/runs)")
    ap.add_argument("--twins-only", action="store_true", help="the real cells are already there: add the twins")
    ap.add_argument("--json", type=Path, help="also write the comparison rows to this JSON file")
    a = ap.parse_args(argv)
    common = [f"run_id={a.run_id}", f"results_dir={a.results_dir}", "progress=off", *extra]
    if not a.twins_only:
        code = speedbench_run(["-m", EXPERIMENT, *common])
        if code:
            return code
    folder = RunFolder.of(a.results_dir, a.run_id)
    if not folder.has_cells:
        print(f"{folder.root}: no cells (run without --twins-only first)", file=sys.stderr)
        return 2
    store = ResultsStore(folder.root)
    real = real_cells(store)
    if real.empty:
        print(f"{folder.root}: no real load-point cell (load.concurrency set, no synthetic_rates)", file=sys.stderr)
        return 2
    done = {r["cell_id"] for r, _ in twins(store.cells())}
    for _, cell in real.iterrows():
        if cell["cell_id"] in done:
            continue
        # the twin's load point is the real cell's own: one value of C, the rest as the experiment and extra say
        over = [o for o in extra if not o.startswith("load.concurrency=")]
        code = speedbench_run(["-m", EXPERIMENT, *common[:3], *over, *twin_overrides(cell)])
        if code:
            return code
    rows = comparison(store.cells(), [folder.root])
    for r in rows:
        lo, hi = r["ratio CI"]
        print(f"C={r['C']} D={r['D']}: speedup real {r['speedup real']:.3f} "
              f"[{r['real CI'][0]:.3f}, {r['real CI'][1]:.3f}], synthetic {r['speedup synthetic']:.3f} "
              f"[{r['synthetic CI'][0]:.3f}, {r['synthetic CI'][1]:.3f}]; ratio {r['ratio']:.3f} "
              f"[{lo:.3f}, {hi:.3f}] ({r['verdict']}); AL {r['AL real']:.3f} vs {r['AL synthetic']:.3f}; "
              f"var step {r['var step real']:.3f} vs {r['var step synthetic']:.3f}; var request AL "
              f"{r['var request AL real']:.4f} vs {r['var request AL synthetic']:.4f}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
