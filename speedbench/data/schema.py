"""The SPEED-Bench record format and the per-record checks.

A record is one JSON object (one JSONL line, one Parquet row)::

    {"question_id": "coding-001", "category": "coding", "sub_category": "complete_function",
     "turns": ["Complete this function: ..."], "source": "speedbench", "src_id": "",
     "difficulty": "easy", "multiturn": false}

Throughput records add ``context_bucket`` ("1k"), ``entropy_tier`` ("low"|"mixed"|"high")
and ``prompt_tokens`` / ``length_mode`` / ``tokenizer`` (how the exact length was measured).
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import Issue
from .spec import ENTROPY_TIERS

REQUIRED_FIELDS = ("question_id", "category", "turns")
OPTIONAL_STR_FIELDS = ("sub_category", "source", "difficulty", "context_bucket", "length_mode", "tokenizer")

# The hub copy of nvidia/SPEED-Bench ships this text where a prompt must be rebuilt from its
# original source; the prepare step replaces it.
PLACEHOLDER_MARKER = "FULL BENCHMARK DATA SHOULD BE FETCHED"

PREPARE_HINT = (
    "this prompt is still the hub placeholder; prepare SPEED-Bench first: in NVIDIA "
    "Model-Optimizer run `python examples/specdec_bench/prepare_data.py --dataset speed "
    "--config all --output_dir data/`, then point the dataset at the prepared copy, e.g. "
    "dataset.source=speed_bench dataset.path=data/speed dataset.config=qualitative "
    "(see datasets/README.md)"
)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_record(
    record: Any,
    *,
    path: str,
    line: int,
    known_categories: frozenset[str],
    field_label: Callable[[str], str] = str,
) -> list[Issue]:
    """Problems in one record. ``field_label`` turns a record field into the name the
    user's file uses (for column-mapped sources)."""

    def issue(field: str, message: str) -> Issue:
        return Issue(path, line, field_label(field) if field else "", message)

    if not isinstance(record, dict):
        return [issue("", f"expected a JSON object, got {_type_name(record)}")]

    issues = [issue(f, "missing required field") for f in REQUIRED_FIELDS if f not in record]

    qid = record.get("question_id")
    if "question_id" in record:
        if isinstance(qid, bool) or not isinstance(qid, (str, int)):
            issues.append(issue("question_id", f"must be a string or integer, got {_type_name(qid)}"))
        elif str(qid).strip() == "":
            issues.append(issue("question_id", "is empty"))

    if "category" in record:
        category = record["category"]
        if not _is_str(category):
            issues.append(issue("category", f"must be a string, got {_type_name(category)}"))
        elif category not in known_categories:
            known = ", ".join(sorted(known_categories))
            issues.append(issue("category", f"unknown category {category!r} (known: {known})"))

    if "turns" in record:
        issues.extend(_check_turns(record["turns"], issue))

    for name in OPTIONAL_STR_FIELDS:
        value = record.get(name)
        if value is not None and not _is_str(value):
            issues.append(issue(name, f"must be a string, got {_type_name(value)}"))

    src_id = record.get("src_id")
    if src_id is not None and (isinstance(src_id, bool) or not isinstance(src_id, (str, int))):
        issues.append(issue("src_id", f"must be a string or integer, got {_type_name(src_id)}"))

    tier = record.get("entropy_tier")
    if tier is not None and tier not in ENTROPY_TIERS:
        issues.append(issue("entropy_tier", f"must be one of {', '.join(ENTROPY_TIERS)}, got {tier!r}"))

    tokens = record.get("prompt_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        issues.append(issue("prompt_tokens", f"must be a non-negative integer, got {tokens!r}"))

    multiturn = record.get("multiturn")
    if multiturn is not None:
        if not isinstance(multiturn, bool):
            issues.append(issue("multiturn", f"must be true or false, got {_type_name(multiturn)}"))
        elif isinstance(record.get("turns"), list) and multiturn != (len(record["turns"]) > 1):
            n = len(record["turns"])
            issues.append(issue("multiturn", f"is {str(multiturn).lower()} but turns has {n} entr{'y' if n == 1 else 'ies'}"))
    return issues


def _check_turns(turns: Any, issue: Callable[[str, str], Issue]) -> list[Issue]:
    if isinstance(turns, tuple):
        turns = list(turns)
    if not isinstance(turns, list):
        return [issue("turns", f"must be a list of strings, got {_type_name(turns)}")]
    if not turns:
        return [issue("turns", "is an empty list (need at least one user turn)")]
    found = []
    for i, turn in enumerate(turns):
        if not _is_str(turn):
            found.append(issue(f"turns[{i}]", f"must be a string, got {_type_name(turn)}"))
        elif not turn.strip():
            found.append(issue(f"turns[{i}]", "is empty"))
        elif PLACEHOLDER_MARKER in turn.upper():
            found.append(issue(f"turns[{i}]", PREPARE_HINT))
    return found
