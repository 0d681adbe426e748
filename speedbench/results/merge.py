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
Failed attempts (``failures.jsonl``: a failed re-measurement of a measured cell, which kept the
cell) move with the same rules: one attempt (its cell id and time; every line of it in one
folder) is kept once when two folders hold it identically, and two different records of one
attempt are refused like two different measurements (``--prefer newest``: the newest
``failures.jsonl``'s). The merged ``failures.jsonl`` is every attempt kept, oldest first.
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
class AttemptCopy:
    """One failed attempt at a measured cell (its ``failures.jsonl`` lines) as found in one folder."""

    cell_id: str
    at: str
    root: Path
    lines: tuple[dict, ...]
    mtime_ns: int  # its failures.jsonl's

    @property
    def row(self) -> tuple[dict, ...]:  # compared as a whole, like a cell's row
        return self.lines


@dataclass(frozen=True)
class MergeResult:
    copied: int
    kept: int
    duplicates: int
    conflicts: tuple[str, ...]
    attempts: int = 0  # failed attempts in the merged failures.jsonl


class MergeConflict(Exception):
    pass


def cells_in(root: Path) -> list[CellCopy]:
    out = []
    for path in RunFolder(root).cell_paths():
        out.append(CellCopy(path.stem, root, read_cell_file(path), path.stat().st_mtime_ns))
    return out


def attempts_in(root: Path) -> list[AttemptCopy]:
    store = ResultsStore(root)
    by_attempt: dict[tuple[str, str], list[dict]] = {}
    for line in store.failures():
        by_attempt.setdefault((str(line["cell_id"]), str(line.get("at", ""))), []).append(line)
    mtime = store.failures_path.stat().st_mtime_ns if by_attempt else 0
    return [AttemptCopy(cid, at, root, tuple(lines), mtime) for (cid, at), lines in by_attempt.items()]


def choose(a: CellCopy, b: CellCopy, prefer: str) -> CellCopy:
    """The copy of one cell to keep; raises MergeConflict for two different measurements."""
    if _canonical(a.row) == _canonical(b.row):
        return a
    if a.ok != b.ok:
        return a if a.ok else b
    return _newest(a, b, prefer, f"cell {a.cell_id}: different results in {a.root} and {b.root}")


def choose_attempt(a: AttemptCopy, b: AttemptCopy, prefer: str) -> AttemptCopy:
    """The record of one failed attempt to keep; raises MergeConflict for two different records of it."""
    if _canonical(a.row) == _canonical(b.row):
        return a
    return _newest(a, b, prefer, f"cell {a.cell_id}: different records of its failed attempt at {a.at} in "
                                 f"{RunFolder(a.root).failures_path} and {RunFolder(b.root).failures_path}")


def _newest(a, b, prefer: str, conflict: str):
    if prefer == "newest":
        return a if a.mtime_ns >= b.mtime_ns else b
    raise MergeConflict(conflict)


def _union(copies, sources: list[Path], key, read, pick, prefer: str) -> tuple[dict, int, list[str]]:
    """Every source's copies added to ``copies`` (key -> copy, ``out``'s own): duplicates counted,
    conflicts listed, ``pick`` choosing between two copies of one key."""
    duplicates, conflicts = 0, []
    for src in sources:
        for item in read(src):
            k = key(item)
            if k not in copies:
                copies[k] = item
                continue
            duplicates += 1
            try:
                copies[k] = pick(copies[k], item, prefer)
            except MergeConflict as exc:
                conflicts.append(str(exc))
    return copies, duplicates, conflicts


def _canonical(row: dict) -> str:
    return json.dumps(row, sort_keys=True)  # NaN-safe equality (NaN != NaN as floats)


def merge(out: Path, sources: list[Path], prefer: str = "error") -> MergeResult:
    """Merge ``sources`` into ``out`` (cells already in ``out`` take part like a source)."""
    out = Path(out)
    sources = [Path(s) for s in sources if Path(s).resolve() != out.resolve()]
    chosen: dict[str, CellCopy] = {c.cell_id: c for c in cells_in(out)}
    existing = dict(chosen)
    chosen, duplicates, conflicts = _union(chosen, sources, lambda c: c.cell_id, cells_in, choose, prefer)
    attempts, _, attempt_conflicts = _union({(a.cell_id, a.at): a for a in attempts_in(out)}, sources,
                                            lambda a: (a.cell_id, a.at), attempts_in, choose_attempt, prefer)
    conflicts += attempt_conflicts
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
    ResultsStore(out).write_failures(line for a in sorted(attempts.values(), key=lambda a: (a.at, a.cell_id))
                                     for line in a.lines)
    _merge_provenance(out, sources)
    ResultsStore(out).rebuild_table()
    return MergeResult(copied, len(chosen) - copied, duplicates, (), len(attempts))


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
    attempts = f"; {result.attempts} failed attempt(s) in failures.jsonl" if result.attempts else ""
    print(f"merged {len(args.dirs)} folder(s) into {args.out}: {n} cells ({result.copied} copied, "
          f"{result.duplicates} duplicate ids){attempts}")
    return 0
