"""``speedbench merge OUT DIR [DIR ...]``: many results folders into one.

A Slurm sweep whose jobs wrote into different folders (other run ids, other machines)
becomes one results folder for the report and the gate. Each cell moves as a unit:
``cells/<id>.json`` with its ``requests/`` and ``steps/`` files, copied atomically with
their modification times kept. The cell table is rebuilt from ``cells/``.

Duplicates (the same cell id in two folders):
  * identical cell rows: one copy is kept;
  * an ``ok`` cell and a ``failed`` one: the ``ok`` one wins (as a resume would redo it);
  * two different measurements: refused (exit 3) unless ``--prefer newest``, which keeps
    the most recently written cell.
Provenance: the first folder's ``provenance.json`` stays the top level; every source's
provenance is kept under ``merged_from``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..records import STATUS_OK
from .layout import RunFolder
from .store import ResultsStore, atomic_write_bytes, check_folder, read_cell_file

EXIT_USAGE, EXIT_CONFLICT = 2, 3


@dataclass(frozen=True)
class CellCopy:
    """One cell as found in one results folder."""

    cell_id: str
    root: Path
    row: dict
    mtime_ns: int

    @property
    def ok(self) -> bool:
        return self.row.get("status") == STATUS_OK

    def files(self) -> list[Path]:
        return RunFolder(self.root).cell_files(self.cell_id)


@dataclass(frozen=True)
class MergeResult:
    copied: int
    kept: int
    duplicates: int
    conflicts: tuple[str, ...]


class MergeConflict(Exception):
    pass


def cells_in(root: Path) -> list[CellCopy]:
    out = []
    for path in RunFolder(root).cell_paths():
        out.append(CellCopy(path.stem, root, read_cell_file(path), path.stat().st_mtime_ns))
    return out


def choose(a: CellCopy, b: CellCopy, prefer: str) -> CellCopy:
    """The copy of one cell to keep; raises MergeConflict for two different measurements."""
    if _canonical(a.row) == _canonical(b.row):
        return a
    if a.ok != b.ok:
        return a if a.ok else b
    if prefer == "newest":
        return a if a.mtime_ns >= b.mtime_ns else b
    raise MergeConflict(f"cell {a.cell_id}: different results in {a.root} and {b.root}")


def _canonical(row: dict) -> str:
    return json.dumps(row, sort_keys=True)  # NaN-safe equality (NaN != NaN as floats)


def merge(out: Path, sources: list[Path], prefer: str = "error") -> MergeResult:
    """Merge ``sources`` into ``out`` (cells already in ``out`` take part like a source)."""
    out = Path(out)
    sources = [Path(s) for s in sources if Path(s).resolve() != out.resolve()]
    chosen: dict[str, CellCopy] = {c.cell_id: c for c in cells_in(out)}
    existing = dict(chosen)
    conflicts, duplicates = [], 0
    for src in sources:
        for cell in cells_in(src):
            if cell.cell_id not in chosen:
                chosen[cell.cell_id] = cell
                continue
            duplicates += 1
            try:
                chosen[cell.cell_id] = choose(chosen[cell.cell_id], cell, prefer)
            except MergeConflict as exc:
                conflicts.append(str(exc))
    if conflicts:  # nothing written: a refused merge leaves ``out`` as it was
        return MergeResult(0, 0, duplicates, tuple(conflicts))
    copied = 0
    for cell_id, cell in chosen.items():
        if existing.get(cell_id) is cell:
            continue
        target = RunFolder(out)
        for part in (target.requests_path(cell_id), target.steps_path(cell_id)):  # a replaced cell keeps no old records
            part.unlink(missing_ok=True)
        for path in cell.files():
            _copy(path, out / path.relative_to(cell.root))
        copied += 1
    _merge_provenance(out, sources)
    ResultsStore(out).rebuild_table()
    return MergeResult(copied, len(chosen) - copied, duplicates, ())


def _copy(src: Path, dst: Path) -> None:
    atomic_write_bytes(dst, src.read_bytes())
    stat = src.stat()
    os.utime(dst, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _merge_provenance(out: Path, sources: list[Path]) -> None:
    store = ResultsStore(out)
    top = store.provenance()
    merged = list(top.pop("merged_from", []))
    if top and not merged:  # ``out`` had its own results before: keep its provenance too
        merged.append({"source": str(out), "provenance": dict(top)})
    seen = {m["source"] for m in merged}
    for src in sources:
        prov = ResultsStore(src).provenance()
        if str(src) not in seen:
            merged.append({"source": str(src), "provenance": prov})
            seen.add(str(src))
        if not top and prov:
            top = dict(prov)
    store.write_provenance({**top, "merged_from": merged})


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, help="the merged results folder (created if missing)")
    parser.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="results folders to merge into OUT")
    parser.add_argument(
        "--prefer", choices=("error", "newest"), default="error",
        help="two different results for one cell id: refuse (default) or keep the newest",
    )


def main(args: argparse.Namespace) -> int:
    for d in (args.out, *args.dirs):
        check_folder(d)  # a symlink loop is named (cli: one line, exit 2)
    missing = [str(d) for d in args.dirs if not RunFolder(d).has_cells]
    if missing:
        print(f"speedbench merge: not a results folder (no cells/): {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    result = merge(args.out, list(args.dirs), args.prefer)
    if result.conflicts:
        print(f"speedbench merge: {len(result.conflicts)} conflicting cell(s); nothing written:", file=sys.stderr)
        for line in result.conflicts:
            print(f"  {line}", file=sys.stderr)
        print("  rerun with --prefer newest to keep the most recent result of each", file=sys.stderr)
        return EXIT_CONFLICT
    n = result.copied + result.kept
    print(f"merged {len(args.dirs)} folder(s) into {args.out}: {n} cells ({result.copied} copied, {result.duplicates} duplicate ids)")
    return 0
