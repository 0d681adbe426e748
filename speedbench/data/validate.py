"""Checking a whole dataset before any model runs.

``validate_file`` returns every problem (unknown category, empty turn, duplicate
question_id, wrong types, malformed JSON line, prompt longer than the model's context...);
``check_file`` / ``raise_if_issues`` raise one ``DatasetError`` that lists them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .errors import DatasetError, Issue
from .readers import data_files, read_rows
from .schema import check_record
from .spec import QUALITATIVE_CATEGORIES, THROUGHPUT_CATEGORIES, resolve_path
from .tokens import count_tokens


@dataclass(frozen=True)
class Row:
    """One decoded record and where it came from."""

    path: str
    line: int
    record: Any


def known_categories(extra: Iterable[str] = ()) -> frozenset[str]:
    return frozenset(QUALITATIVE_CATEGORIES) | frozenset(THROUGHPUT_CATEGORIES) | frozenset(extra)


def validate_rows(
    rows: Sequence[Row],
    *,
    categories: frozenset[str] | None = None,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
    field_label: Callable[[str], str] = str,
) -> list[Issue]:
    """All problems in ``rows``: per-record schema, duplicate ids, over-long prompts."""
    categories = known_categories() if categories is None else categories
    issues: list[Issue] = []
    first_seen: dict[str, tuple[str, int]] = {}
    for row in rows:
        found = check_record(row.record, path=row.path, line=row.line, known_categories=categories, field_label=field_label)
        if not found and isinstance(row.record, dict):
            found = _unencodable(row, field_label)
        issues.extend(found)
        if not isinstance(row.record, dict):
            continue
        qid = row.record.get("question_id")
        if isinstance(qid, (str, int)) and not isinstance(qid, bool):
            key = str(qid)
            if key in first_seen:
                where = "%s:%d" % first_seen[key]
                issues.append(Issue(row.path, row.line, field_label("question_id"), f"duplicate question_id {key!r} (first at {where})"))
            else:
                first_seen[key] = (row.path, row.line)
        if tokenizer is not None and max_prompt_tokens is not None and not found:
            n = sum(count_tokens(tokenizer, turn) for turn in row.record["turns"])
            if n > max_prompt_tokens:
                issues.append(
                    Issue(row.path, row.line, field_label("turns"), f"prompt has {n} tokens, over the prompt-token limit of {max_prompt_tokens}")
                )
    return issues


def _unencodable(row: Row, field_label: Callable[[str], str]) -> list[Issue]:
    """Strings no tokenizer can take: lone surrogates (``"\\ud800"`` in JSON) are not UTF-8."""
    issues = []
    for key, value in row.record.items():
        values = value if isinstance(value, list) else [value]
        for i, text in enumerate(values):
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                name = f"{key}[{i}]" if isinstance(value, list) else str(key)
                issues.append(Issue(row.path, row.line, field_label(name),
                                    f"character {err.start + 1} is a lone surrogate ({text[err.start]!r}), not valid Unicode text"))
    return issues


def read_file_rows(path: Path) -> tuple[list[Row], list[Issue]]:
    """Rows of a file or of every data file in a folder, plus read problems."""
    rows: list[Row] = []
    issues: list[Issue] = []
    for file in data_files(path):
        decoded, problems = read_rows(file)
        rows.extend(Row(str(file), line, obj) for line, obj in decoded)
        issues.extend(problems)
    return rows, issues


def validate_file(
    path: str | Path,
    max_prompt_tokens: int | None = None,
    tokenizer: Any = None,
    extra_categories: Iterable[str] = (),
) -> list[Issue]:
    """Every problem in a SPEED-Bench-format JSONL/Parquet file (or folder of them)."""
    try:
        rows, issues = read_file_rows(resolve_path(path))
    except DatasetError as err:
        return [Issue(str(path), 0, "", str(err))]
    return issues + validate_rows(
        rows, categories=known_categories(extra_categories), tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens
    )


def raise_if_issues(issues: Sequence[Issue], what: str) -> None:
    if issues:
        raise DatasetError(f"invalid dataset {what}", issues)


def check_file(
    path: str | Path,
    max_prompt_tokens: int | None = None,
    tokenizer: Any = None,
    extra_categories: Iterable[str] = (),
) -> None:
    """Like ``validate_file`` but raises ``DatasetError`` listing all problems."""
    raise_if_issues(validate_file(path, max_prompt_tokens, tokenizer, extra_categories), str(path))
