"""The results store: one folder per run, readable by the report, the gate and W&B alike.

    results/<run-id>/
      cells/<cell_id>.json        one finished (or failed) cell, written atomically
      requests/<cell_id>.parquet  per-request records of the baseline and speculative runs
      steps/<cell_id>.parquet     per-step records
      cells.parquet, cells.csv, cells.jsonl   the cell table, rebuilt from cells/ after each cell
      provenance.json             git SHA, versions, device, resolved config, seeds (no secrets)
      failures.jsonl              failed attempts at cells already measured (the measured cell stays)

Every write goes to a temporary file and is renamed into place, so a process killed at any
moment leaves only whole files: a finished cell is never lost and never half-written. Files
get the mode the umask gives any new file (0644 under umask 022), not mkstemp's 0600.
Folders written by many jobs (a Slurm array) merge by copying ``cells/``, ``requests/`` and
``steps/`` side by side; the cell table is rebuilt from them.

Faults: every cell file is read by :func:`read_cell_file`, so a truncated or malformed one is a
:class:`ResultsReadError` naming the file (and the field) for every command that reads it; a
write that fails (a full disk, a read-only folder) is a :class:`ResultsWriteError` naming the
folder. A cell's own files are written before the table: a table that cannot be rebuilt never
touches a cell already written.
"""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from ..records import STATUS_OK, CellResult, field_names, to_row
from ..redact import REDACTED, redact
from .layout import RunFolder

log = logging.getLogger(__name__)

CELL_COLUMNS = field_names(CellResult)
NUMERIC_COLUMNS = tuple(f.name for f in fields(CellResult) if f.type == "float")


class ResultsReadError(ValueError):
    """A results file that is not what it should be (truncated, not JSON, a non-numeric metric); names the file."""


class ResultsWriteError(Exception):
    """The results folder cannot take a file (disk full, read-only); names the folder."""


def read_cell_file(path: Path) -> dict[str, Any]:
    """One cell file as a row; a file that is not one whole JSON object with numeric metrics is a
    ``ResultsReadError`` naming the file (and the field). The one reader of cell files."""
    path = Path(path)
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsReadError(f"{path}: unreadable cell file ({type(exc).__name__}: {exc})") from exc
    if not isinstance(row, dict):
        raise ResultsReadError(f"{path}: a cell file must hold one JSON object, got {type(row).__name__}")
    for key in NUMERIC_COLUMNS:
        value = row.get(key)
        if value == REDACTED:  # a measurement an older redaction rule hid by its name (token_match_rate): unknown
            row[key] = None
        elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ResultsReadError(f"{path}: {key} must be a number, got {value!r}")
    return row


def check_folder(path: str | Path) -> Path:
    """``path`` as given; a symlink loop in it (e.g. ``latest -> latest``) is a ``ResultsReadError``
    naming it (else it reads as a folder that does not exist)."""
    path = Path(path)
    try:
        path.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: Python < 3.13; OSError (ELOOP) after
        target = os.readlink(path) if path.is_symlink() else "?"
        raise ResultsReadError(f"results folder {path}: a symlink loop ({path} -> {target}); "
                               "give the run folder itself or remove the link") from exc
    return path


def _writing(root: Path, what: str, write) -> None:
    """Run ``write()``; an OSError becomes one ``ResultsWriteError`` naming the folder."""
    try:
        write()
    except ResultsWriteError:
        raise
    except OSError as exc:
        raise ResultsWriteError(f"results folder {root}: cannot write {what} ({exc.strerror or exc}); "
                                "nothing already written was changed") from exc


def _umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux), else swapped."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` would give a new file (0644 under the usual umask 022);
    ``mkstemp`` alone would leave 0600 and teammates could not read the results."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _json_default(obj: Any):
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_json_default, allow_nan=True)


def atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, file_mode())
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ResultsStore(RunFolder):
    """Reads and writes a run folder; every path comes from :class:`~speedbench.results.layout.RunFolder`."""

    # -- writing ---------------------------------------------------------------
    def write_cell(self, cell: CellResult, records: Iterable[Any] = (), steps: Iterable[Any] = ()) -> bool:
        """The cell's records, steps and row (in that order, each atomic), then the table; True when written.

        No write replaces a measured cell with a failed one: a failed attempt at a cell already
        measured (``finished``) leaves its row, records, steps and the table as they are, and is one
        line in ``failures.jsonl`` and a warning instead (False). A cell written without records or
        steps drops those an earlier attempt left, so a row never sits beside another run's records.

        Any write that fails is a ``ResultsWriteError``; once the row is written, a failure
        rebuilding the table leaves the cell as written (the table is rebuilt from ``cells/``).
        """
        records, steps = list(records), list(steps)
        cid = cell.cell_id
        if cell.status != STATUS_OK and self.finished(cid):
            self._keep_measured(cell)
            return False

        def own_files() -> None:
            for path, rows in ((self.requests_path(cid), records), (self.steps_path(cid), steps)):
                if rows:
                    atomic_write_parquet(path, _frame(rows))
                else:
                    path.unlink(missing_ok=True)
            atomic_write_text(self.cell_path(cid), dumps(redact(to_row(cell))))

        _writing(self.root, f"cell {cid}", own_files)
        self.rebuild_table()
        return True

    def _keep_measured(self, cell: CellResult) -> None:
        """A failed attempt at a measured cell: a line in ``failures.jsonl``, a warning; the cell stays."""
        line = {"cell_id": cell.cell_id, "category": cell.category, "at": _utc_now(), "status": cell.status,
                "error": cell.error, "kept": str(self.cell_path(cell.cell_id).relative_to(self.root))}

        def append() -> None:
            with open(self.failures_path, "a", encoding="utf-8") as handle:
                handle.write(_failure_line(line))

        _writing(self.root, self.failures_path.name, append)
        log.warning("cell %s (%s): this attempt failed (%s); the measured cell is kept as it was, the failure "
                    "is in %s", cell.cell_id, cell.category, redact(cell.error), self.failures_path)

    def write_failures(self, lines: Iterable[dict[str, Any]]) -> None:
        """``failures.jsonl`` as ``lines`` (one atomic write; ``speedbench merge``); none: left as it is."""
        text = "".join(_failure_line(line) for line in lines)
        if text:
            _writing(self.root, self.failures_path.name, lambda: atomic_write_text(self.failures_path, text))

    def write_provenance(self, provenance: dict[str, Any]) -> None:
        _writing(self.root, self.provenance_path.name,
                 lambda: atomic_write_text(self.provenance_path, dumps(redact(provenance))))

    def rebuild_table(self) -> pd.DataFrame:
        table = self.cells()
        if not table.empty:
            flat = table.copy()
            for col in flat.columns:
                if flat[col].map(lambda v: isinstance(v, (list, dict))).any():
                    flat[col] = flat[col].map(lambda v: json.dumps(v) if isinstance(v, (list, dict)) else v)

            def write() -> None:
                atomic_write_parquet(self.table_path("parquet"), flat)
                atomic_write_text(self.table_path("csv"), flat.to_csv(index=False))
                atomic_write_text(
                    self.table_path("jsonl"), "".join(json.dumps(r, default=_json_default) + "\n" for r in table.to_dict("records"))
                )

            _writing(self.root, "the cell table (cells.parquet, cells.csv, cells.jsonl)", write)
        return table

    # -- reading ---------------------------------------------------------------
    def cells(self) -> pd.DataFrame:
        """The cell table (list columns as Python lists), from the per-cell files."""
        rows = self.cell_rows()
        frame = pd.DataFrame(rows, columns=CELL_COLUMNS if not rows else None)
        return frame.fillna(value=math.nan) if not frame.empty else frame

    def cell_rows(self) -> list[dict[str, Any]]:
        """Every cell file's row (``read_cell_file``: a corrupt one is named)."""
        return [read_cell_file(path) for path in self.cell_paths()]

    def cell(self, cell_id: str) -> dict[str, Any]:
        """One cell's row as written (``{}`` when there is none)."""
        path = self.cell_path(cell_id)
        return read_cell_file(path) if path.exists() else {}

    def failures(self) -> list[dict[str, Any]]:
        """The failed attempts at measured cells (``failures.jsonl``, one object a line; ``[]`` when none);
        a line that is not one JSON object is a ``ResultsReadError`` naming the file and the line."""
        path = self.failures_path
        if not path.exists():
            return []
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ResultsReadError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ResultsReadError(f"{path}: line {n} is not JSON ({exc})") from exc
            if not isinstance(row, dict) or not row.get("cell_id"):
                raise ResultsReadError(f"{path}: line {n} is not a failed attempt (a JSON object with a cell_id)")
            rows.append(row)
        return rows

    def finished(self, cell_id: str) -> bool:
        return self.cell(cell_id).get("status") == STATUS_OK

    def requests(self) -> pd.DataFrame:
        return _concat(self.requests_dir)

    def steps(self) -> pd.DataFrame:
        return _concat(self.steps_dir)

    def provenance(self) -> dict[str, Any]:
        path = self.provenance_path
        if not path.exists():
            return {}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsReadError(f"{path}: unreadable provenance ({type(exc).__name__}: {exc})") from exc


def _failure_line(line: dict[str, Any]) -> str:
    return json.dumps(redact(line), default=_json_default) + "\n"


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _frame(records: list[Any]) -> pd.DataFrame:
    rows = [to_row(r) if not isinstance(r, dict) else r for r in records]
    frame = pd.DataFrame(rows)
    redacted: dict[str, str] = {}  # a step file repeats a few strings 10^5 times: each is redacted once

    def clean(v):
        if not isinstance(v, str):
            return v
        if v not in redacted:
            redacted[v] = redact(v)
        return redacted[v]

    for col in frame.columns:  # error texts may quote a URL or a header: every string column is redacted
        if frame[col].map(lambda v: isinstance(v, str)).any():
            frame[col] = frame[col].map(clean)
    return frame


def _concat(folder: Path) -> pd.DataFrame:
    parts = []
    for path in sorted(folder.glob("*.parquet")):
        part = pd.read_parquet(path)
        part.insert(0, "cell_id", path.stem)
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def json_safe(value: Any) -> Any:
    """A value as strict JSON takes it: a number that is not finite (NaN, a closed loop's request_rate
    ``inf``) is null (bare ``NaN``/``Infinity`` tokens are refused by JSON.parse, Go, serde)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return json_safe(value.item())
    return value


def strict_json(data: dict[str, Any]) -> str:
    """Strict JSON, as ``run --json`` and ``capacity`` write it (``json_safe``; a non-finite number left over
    is a bug, not output)."""
    return json.dumps(json_safe(data), indent=2, default=str, allow_nan=False) + "\n"
