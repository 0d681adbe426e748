"""Reading raw rows (with their line numbers) from JSONL and Parquet files."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .errors import DatasetError, Issue

Rows = list[tuple[int, Any]]  # (1-based line or row number, decoded object)


def read_jsonl(path: Path) -> tuple[Rows, list[Issue]]:
    rows: Rows = []
    issues: list[Issue] = []
    try:
        handle = open(path, "rb")
    except OSError as err:
        return [], [Issue(str(path), 0, "", f"cannot read file: {err.strerror or err}")]
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                issues.append(Issue(str(path), number, "", f"invalid UTF-8 at byte {err.start + 1} of the line ({err.reason})"))
                continue
            if not text.strip():
                continue
            try:
                rows.append((number, json.loads(text)))
            except json.JSONDecodeError as err:
                issues.append(Issue(str(path), number, "", f"malformed JSON: {err.msg} (column {err.colno})"))
    return rows, issues


def read_parquet(path: Path) -> tuple[Rows, list[Issue]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001 - any reader failure is a file problem
        return [], [Issue(str(path), 0, "", f"cannot read Parquet file: {err}")]
    return list(enumerate(table.to_pylist(), start=1)), []


READERS: dict[str, Callable[[Path], tuple[Rows, list[Issue]]]] = {
    ".jsonl": read_jsonl,
    ".json": read_jsonl,  # Spec-Bench / MT-Bench ship one JSON object per line
    ".parquet": read_parquet,
}


# Sidecar files in a data folder that are not prompts: ``speedbench data build`` writes
# ``manifest.json`` next to the splits it builds.
SIDECARS = frozenset({"manifest.json"})
# Subfolders that hold another source's records (named after it: ``dataset.source=agentic``); reading a
# folder as SPEED-Bench records skips them, and ``speedbench data validate FOLDER`` checks each with its source.
SOURCE_FOLDERS = frozenset({"agentic"})


def data_files(path: Path) -> list[Path]:
    """The readable files of a file or folder (folders: recursively, sorted, sidecars skipped)."""
    if path.is_file():
        if path.suffix not in READERS:
            raise DatasetError(f"{path}: unsupported file type {path.suffix!r} (supported: {', '.join(READERS)})")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in READERS and p.name not in SIDECARS
                   and not set(p.relative_to(path).parts[:-1]) & SOURCE_FOLDERS)
    if not files:
        raise DatasetError(f"{path}: no {', '.join(READERS)} files in this folder")
    return files


def read_rows(path: Path) -> tuple[Rows, list[Issue]]:
    """Rows of one file, plus problems that prevent decoding some rows."""
    return READERS[path.suffix](path)
