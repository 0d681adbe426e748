"""``speedbench data validate``: the command line over the checks in ``validate`` (any source)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import DatasetError, Issue
from .validate import known_categories, validate_file, validate_rows, read_file_rows, Row  # noqa: F401


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
    parser.add_argument("--control-tokens", choices=("refuse", "escape", "keep"), default="refuse",
                        help="prompt text holding the tokenizer's control strings (<|eos|>, ...; without --tokenizer: "
                        "<|name|>-shaped strings): refuse = a problem (default); escape/keep = allowed, as "
                        "dataset.control_tokens of `speedbench run`")


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
    for file, file_source in _with_source_folders(args.files, source):
        _usable(file)
        issues, n_rows = validate_source_file(file, file_source, column_map, args.max_prompt_tokens, tokenizer, args.category,
                                              getattr(args, "control_tokens", "refuse"))
        if issues:
            status = 1
            print(f"{file}: {len(issues)} problem(s)")
            for issue in issues:
                print(f"  - {issue}")
        else:
            print(f"{file}: OK ({n_rows} records)")
    return status


def _with_source_folders(files: Sequence[str], source: str) -> list[tuple[str, str]]:
    """(path, source) to check: each given path as ``source``; a folder read as ``local`` also has its
    subfolders named after another source (``readers.SOURCE_FOLDERS``) checked as that source."""
    from .readers import SOURCE_FOLDERS

    out = []
    for file in files:
        out.append((file, source))
        if source == "local" and Path(file).is_dir():
            out += [(str(Path(file) / name), name) for name in sorted(SOURCE_FOLDERS) if (Path(file) / name).is_dir()]
    return out


def _usable(file: str) -> None:
    """A path that cannot be used at all (a symlink loop, a name over NAME_MAX, no permission) is the CLI
    edge's one line and exit 2 (raised); a file that is not there is a problem of the file, as in a run."""
    import errno
    import os

    if "://" in str(file) or "/" not in str(file) and not os.path.exists(file):
        return  # a hub id or a shipped set's name: the loader says
    try:
        os.stat(file)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def validate_source_file(
    path: str | Path,
    source: str = "local",
    column_map: dict[str, str] | None = None,
    max_prompt_tokens: int | None = None,
    tokenizer: Any = None,
    extra_categories: Iterable[str] = (),
    control_tokens: str = "refuse",
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
    if control_tokens == "refuse":  # the check `speedbench run` applies (dataset.control_tokens)
        from .control import control_strings, row_issues

        issues += row_issues(rows, control_strings(tokenizer) if tokenizer is not None else None, loader.field_label(spec))
    return issues, len(rows)


def main_validate(argv: Sequence[str] | None = None) -> int:
    """``speedbench data validate FILE...``: exit status 0 when every file is valid."""
    parser = argparse.ArgumentParser(prog="speedbench data validate", description="Validate dataset files in SPEED-Bench format.")
    add_validate_args(parser)
    return run_validate(parser.parse_args(argv))

