"""``speedbench wandb-log RESULTS_DIR``: log an existing results folder to W&B after the fact.

Every cell becomes a run (as with ``logger=wandb`` during the sweep), plus one ``sweep``
run holding the whole cell table and the report's plots (``RESULTS_DIR/report/*.png``,
written by ``speedbench report``) when present. Offline by default; ``--mode online``
uploads directly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import LoggerConfig
from ..results.layout import wandb_dir
from ..results.store import ResultsStore, check_folder


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, help="a results folder (results/runs/<run-id>)")
    parser.add_argument("--project", default="speedbench")
    parser.add_argument("--entity", default=None)
    parser.add_argument("--mode", choices=("offline", "online", "disabled"), default="offline")
    parser.add_argument("--dir", type=Path, default=None, help="where offline runs go (default: RESULTS_DIR)")
    parser.add_argument("--cells", nargs="*", default=None, metavar="CELL_ID", help="only these cells")


def main(args: argparse.Namespace) -> int:
    store = ResultsStore(check_folder(args.results_dir))
    table = store.cells()
    if table.empty:
        print(f"speedbench wandb-log: no cells in {args.results_dir}", file=sys.stderr)
        return 2
    from .wandb_logger import WandbLogger

    options = {k: v for k, v in (("entity", args.entity), ("dir", str(args.dir) if args.dir else None)) if v}
    logger = WandbLogger(LoggerConfig(name="wandb", project=args.project, mode=args.mode, options=options), store.root)
    ids = [c for c in table["cell_id"] if args.cells is None or c in args.cells]
    for cell_id in ids:
        logger.log_cell_id(cell_id, store)
    if args.cells is None:
        logger.log_sweep(store)
    where = wandb_dir(logger.dir) if args.mode == "offline" else f"project {args.project}"
    print(f"logged {len(ids)} cell(s) of {args.results_dir} to W&B ({args.mode}): {where}")
    if args.mode == "offline":
        print(f"upload later with: wandb sync {where}/offline-run-*")
    return 0
