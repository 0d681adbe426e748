#!/usr/bin/env python3
"""Make a real history series for ``speedbench history``: N runs of the CI benchmark of this checkout,
with a calibrated loss from run K on, and the same series without it.

    python scripts/gate_history_series.py --out /tmp/series --runs 10 --step-at 6 --loss 0.03
    speedbench history /tmp/series/step      # a change at run 6 (+-1)
    speedbench history /tmp/series/flat      # no change

Runs 1..K-1 (``pool/base-<i>``) are shared by both series. The loss is calibrated against them
(``speedbench.gate.slowdown``: probe runs ``pool/calib<pct>-<k>``, not part of any series), then the
slowed runs (``pool/slowed-<i>``, ``faults.delay_ms``) and the flat runs (``pool/flat-<i>``) are measured
alternately, one slowed and one flat, so that a drift of the machine lands on both series alike. Each
slowed run's ``slowdown.json`` states the loss it achieved against runs 1..K-1.
``step/`` and ``flat/`` get, per run, ``run-<NN>/``: its ``provenance.json`` (commit and time: the
fields the history reads) and its cell files trimmed to the fields the history reads (values as
measured), plus ``slowdown.json`` where there is one: a small series to commit as test data
(``--keep`` copies whole cell files instead). Runs already in ``pool/`` are reused, never re-measured.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speedbench.gate.core import load_config  # noqa: E402
from speedbench.gate.history import CELL_FIELDS, PROVENANCE_FIELDS  # noqa: E402
from speedbench.gate.slowdown import (SLOWDOWN_FILE, calibrate, calibration_record, existing_runs,  # noqa: E402
                                      load_calibration, record_slowed_run, run_benchmark)


def measured(pool: Path, name: str, overrides: list[str]) -> Path:
    run = pool / name
    if (run / "cells").is_dir() and any((run / "cells").iterdir()):
        return run
    if run.exists():
        shutil.rmtree(run)  # an unfinished run: measured again from the start, never resumed
    print(f"measuring {name}", file=sys.stderr)
    return run_benchmark(pool, name, overrides, REPO)


def export(runs: list[Path], dest: Path, keep: bool) -> None:
    """Write the series into ``dest/run-<NN>/`` with what the history reader needs."""
    if dest.exists():
        shutil.rmtree(dest)
    for n, run in enumerate(runs, 1):
        to = dest / f"run-{n:02d}"
        (to / "cells").mkdir(parents=True)
        prov = json.loads((run / "provenance.json").read_text())
        (to / "provenance.json").write_text(json.dumps({k: prov[k] for k in PROVENANCE_FIELDS if k in prov}, indent=1) + "\n")
        for cell in sorted((run / "cells").glob("*.json")):
            row = json.loads(cell.read_text())
            if not keep:
                row = {k: row[k] for k in CELL_FIELDS if k in row}
            (to / "cells" / cell.name).write_text(json.dumps(row, indent=1) + "\n")
        if (run / SLOWDOWN_FILE).exists():
            shutil.copy(run / SLOWDOWN_FILE, to / SLOWDOWN_FILE)
        (to / "source.txt").write_text(f"{run.name}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--step-at", type=int, default=6, help="the first slowed run (1-based)")
    parser.add_argument("--loss", type=float, default=0.03, help="the pooled speedup loss to inject from --step-at on")
    parser.add_argument("--config", default="ci", help="gate config the loss is measured with")
    parser.add_argument("--keep", action="store_true", help="export whole cell files (default: the fields the history reads)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = parser.parse_args()
    if not 2 <= args.step_at <= args.runs:
        parser.error(f"--step-at must be in [2, --runs], got {args.step_at}")
    pool = args.out / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config)
    base = [measured(pool, f"base-{i}", args.overrides) for i in range(1, args.step_at)]
    cal = load_calibration(pool, args.loss)
    if cal is None:
        def probe(k: int, delay: float) -> Path:
            name = f"calib{round(args.loss * 100)}-{k}"
            done = existing_runs(pool, f"calib{round(args.loss * 100)}")
            return done[k] if k < len(done) else measured(pool, name, [*args.overrides, f"faults.delay_ms={delay:.4f}"])
        cal = calibrate(args.loss, base, cfg, probe)
        calibration_record(pool, cal)
    print(cal.describe(), file=sys.stderr)
    slowed, flat = [], []
    for i in range(args.step_at, args.runs + 1):
        slowed.append(measured(pool, f"slowed-{i}", [*args.overrides, f"faults.delay_ms={cal.delay_ms:.4f}"]))
        if not (slowed[-1] / SLOWDOWN_FILE).exists():
            record_slowed_run(slowed[-1], args.loss, cal.delay_ms, base, cfg)
        flat.append(measured(pool, f"flat-{i}", args.overrides))
    for run in slowed:
        rec = json.loads((run / SLOWDOWN_FILE).read_text())
        print(f"{run.name}: asked {rec['asked_loss']:.1%}, achieved {rec['achieved_loss']:.2%}")
    export(base + slowed, args.out / "step", args.keep)
    export(base + flat, args.out / "flat", args.keep)
    print(f"series: {args.out / 'step'} (loss from run {args.step_at}), {args.out / 'flat'} (none)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
