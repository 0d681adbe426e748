"""What ``speedbench run`` prints and writes once an invocation ends (one run or a whole sweep).

* one table of the results folder, printed once per invocation (not after every sweep job),
  with a banner when any cell came from ``backend=synthetic`` (modelled, nothing ran);
* the sweep verdict, once;
* where W&B offline runs went, when ``logger=wandb`` (offline) wrote some;
* ``<results_dir>/latest``: a symlink to the run folder (a one-line file where symlinks
  cannot be made), so scripts find the newest run without parsing output;
* ``--json FILE``: the cell table, the results path and the exit code for scripts;
* last, the report's pick as one line (``report.pick``: ``pick: ...``, ``nothing beats plain
  decoding (...)`` or ``undecided: ...``), per batch size or load point.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..backends.registry import simulated_backends
from ..results.layout import LATEST, RunFolder
from ..results.store import ResultsStore, atomic_write_text, json_safe, strict_json

SYNTHETIC_BANNER = "backend=synthetic: no model was run; every number below is modelled, not measured"


def summary(root: Path, code: int, verdict: str | None) -> dict[str, Any]:
    """The machine-readable summary of a run folder (what ``--json`` writes)."""
    table = ResultsStore(root).cells()
    records = [json_safe(r) for r in table.to_dict("records")] if not table.empty else []
    return {
        "results": str(root.resolve()),
        "run_id": root.name,
        "exit_code": code,
        "verdict": verdict,
        "n_cells": len(records),
        "n_failed": sum(r.get("status") != "ok" for r in records),
        "synthetic": any(r.get("backend") in simulated_backends() for r in records),
        "cells": records,
    }


def refused(json_path: str, error: str) -> None:
    """``--json`` of a run refused before anything ran (exit 2): the reason, no results."""
    data = {"results": None, "run_id": None, "exit_code": 2, "verdict": None, "error": error, "n_cells": 0,
            "n_failed": 0, "synthetic": False, "cells": []}
    text = strict_json(data)
    if json_path == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(Path(json_path), text)


def point_latest(root: Path) -> Path | None:
    """Make ``<results_dir>/latest`` name ``root``; returns the pointer's path."""
    parent = root.parent
    if not root.is_dir() or root.name == LATEST:  # never a pointer to itself (run_id=latest is refused)
        return None
    link = RunFolder(root).latest_link
    tmp = parent / f".{LATEST}.{os.getpid()}.tmp"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(root.name, tmp, target_is_directory=True)
        if link.is_dir() and not link.is_symlink():
            tmp.unlink()
            return None  # a real folder named "latest" (a run_id): leave it alone
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        if link.is_symlink() or link.is_dir():
            return None
        try:
            atomic_write_text(link, root.name + "\n")
        except OSError:  # a full disk: the results are written, only the pointer is missing
            return None
    return link


def added_by_this_invocation(root: Path, table, since: float | None):
    """(the rows to print, a note): in a folder this invocation resumed, only the cells it wrote
    (their files are newer than ``since``, when it started), and a line saying how many it kept."""
    if since is None or table.empty or "cell_id" not in table.columns:
        return table, ""
    written = {p.stem: p.stat().st_mtime for p in RunFolder(root).cell_paths()}
    mask = table["cell_id"].map(lambda c: written.get(c, 0.0) >= since)
    n_new, n_kept = int(mask.sum()), int((~mask).sum())
    if not n_kept:
        return table, ""
    if not n_new:
        return table, f"nothing new: all {n_kept} cell(s) were already measured in this folder"
    return table[mask], (f"resumed: {n_new} cell(s) written by this run (below), {n_kept} kept from before "
                         f"(every cell: {RunFolder(root).root / 'cells.csv'}, or speedbench report)")


def report(root: Path, *, code: int, verdict: str | None, verdict_ok: bool, json_path: str | None,
           wandb_dir: Path | None = None, wide: bool = False, since: float | None = None,
           error: str | None = None) -> None:
    """The table and the ``--json`` summary of a run folder; ``error``: why the run was refused (exit 2)
    while its folder already held cells (kept; the summary says why nothing new ran, as ``refused`` does)."""
    from ..pipeline.summary import format_table

    root = Path(root)
    data = summary(root, code, verdict)
    if error is not None:
        data["error"] = error
    point_latest(root)
    to_stdout_json = json_path == "-"
    out = sys.stderr if to_stdout_json else sys.stdout
    table = ResultsStore(root).cells()
    print(f"\nresults: {root}", file=out)
    if data["synthetic"]:
        print(SYNTHETIC_BANNER, file=out)
    shown, note = added_by_this_invocation(root, table, since)
    if note:
        print(note, file=out)
    print(format_table(shown, wide=wide), file=out)
    if wandb_dir is not None and Path(wandb_dir).is_dir():
        print(f"W&B offline runs: {wandb_dir}  (upload: wandb sync {wandb_dir}/offline-run-*)", file=out)
    if verdict:
        print(verdict, file=sys.stderr if not verdict_ok else out)
    for line in picks(root):
        print(line, file=out)
    if json_path:
        text = strict_json(data)
        if to_stdout_json:
            sys.stdout.write(text)
        else:
            atomic_write_text(Path(json_path), text)


def picks(root: Path) -> list[str]:
    """The report's *What to pick* as the run's last line(s) (``report.pick``); a folder the report
    cannot read gets one line saying so (the cells are written; the table above is the run's)."""
    import logging

    from ..report.pick import pick_lines

    try:
        return pick_lines(root)
    except Exception as exc:  # noqa: BLE001 - the pick restates the report; it must not turn a finished run into a crash
        logging.getLogger(__name__).debug("pick line failed", exc_info=True)
        return [f"pick: n/a (the report could not read {root}: {type(exc).__name__}: {exc})"]
