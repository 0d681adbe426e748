"""Checking a whole dataset before any model runs.

``validate_file`` returns every problem (unknown category, empty turn, duplicate
question_id, wrong types, malformed JSON line, prompt longer than the model's context...);
``check_file`` / ``raise_if_issues`` raise one ``DatasetError`` that lists them all.
"""
from __future__ import annotations

import argparse
import sys
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
                    Issue(row.path, row.line, field_label("turns"), f"prompt has {n} tokens, over the limit of {max_prompt_tokens} (the model's context)")
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


def load_tokenizer(name_or_path: str) -> Any:
    """A tokenizer for the CLI: ``builtin:NAME`` (a shipped model), ``random:PRESET`` (the byte
    tokenizer of the seeded test models), a local folder or a hub id, like every other
    subcommand that takes a model."""
    from speedbench.console import UsageError
    from speedbench.models import load_tokenizer as load

    try:
        return load(name_or_path)
    except (OSError, ValueError, KeyError) as exc:  # transformers' "not a folder nor a hub id"
        raise UsageError(f"cannot load tokenizer {name_or_path!r}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None


def add_validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="JSONL/Parquet file(s) or folder(s) in SPEED-Bench format")
    parser.add_argument("--source", default="local", help="the file's format, as dataset.source of `speedbench run`: "
                        "local (SPEED-Bench records), spec_bench, mt_bench, speed_bench, generic (with --column)")
    parser.add_argument("--column", action="append", default=[], metavar="SRC=FIELD",
                        help="generic source: map a column to a record field, e.g. prompt=turns (repeatable)")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="report prompts longer than this (needs --tokenizer)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer used to count prompt tokens: builtin:NAME, random:PRESET, a folder or a hub id")
    parser.add_argument("--category", action="append", default=[], help="also accept this category (repeatable)")


def run_validate(args: argparse.Namespace) -> int:
    if args.max_prompt_tokens is not None and not args.tokenizer:
        print("error: --max-prompt-tokens needs --tokenizer", file=sys.stderr)
        return 2
    from .sources import SOURCES

    source = getattr(args, "source", "local")
    if source not in SOURCES:
        print(f"error: unknown --source {source!r} (known: {', '.join(sorted(SOURCES))})", file=sys.stderr)
        return 2
    try:
        column_map = dict(item.split("=", 1) for item in getattr(args, "column", []))
    except ValueError:
        print("error: --column takes SRC=FIELD, e.g. prompt=turns", file=sys.stderr)
        return 2
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    status = 0
    for file in args.files:
        issues, n_rows = validate_source_file(file, source, column_map, args.max_prompt_tokens, tokenizer, args.category)
        if issues:
            status = 1
            print(f"{file}: {len(issues)} problem(s)")
            for issue in issues:
                print(f"  - {issue}")
        else:
            print(f"{file}: OK ({n_rows} records)")
    return status


def validate_source_file(
    path: str | Path,
    source: str = "local",
    column_map: dict[str, str] | None = None,
    max_prompt_tokens: int | None = None,
    tokenizer: Any = None,
    extra_categories: Iterable[str] = (),
) -> tuple[list[Issue], int]:
    """Every problem in ``path`` read as ``dataset.source=source`` reads it in ``speedbench run``
    (the same loader, normalisation and extra categories); plus the number of records."""
    from .spec import DatasetSpec
    from .sources import get_source

    loader = get_source(source)
    spec = DatasetSpec(source=source, path=str(path), column_map=column_map or {})
    try:
        rows, issues = loader.load(spec)
    except DatasetError as err:
        return [Issue(str(path), 0, "", str(err))], 0
    categories = known_categories((*loader.extra_categories, *extra_categories))
    issues = issues + validate_rows(rows, categories=categories, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens,
                                    field_label=loader.field_label(spec))
    return issues, len(rows)


def main_validate(argv: Sequence[str] | None = None) -> int:
    """``speedbench data validate FILE...``: exit status 0 when every file is valid."""
    parser = argparse.ArgumentParser(prog="speedbench data validate", description="Validate dataset files in SPEED-Bench format.")
    add_validate_args(parser)
    return run_validate(parser.parse_args(argv))

