"""``load_requests``: the one public entry point from a DatasetSpec to Requests."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from speedbench.records import Request

from .errors import DatasetError
from .selection import stratified_select
from .sources import get_source
from .spec import DATASET_TIERS, TIER_ALIASES, DatasetSpec, bucket_from_config
from .validate import Row, known_categories, raise_if_issues, validate_rows


def load_requests(spec: DatasetSpec, tokenizer: Any = None) -> list[Request]:
    """Load, validate (the whole file, before anything runs), filter and select requests.

    Raises ``DatasetError`` listing every problem found. ``tokenizer`` is only needed
    to enforce ``spec.max_prompt_tokens``.
    """
    if spec.tier not in DATASET_TIERS:
        raise DatasetError(f"dataset.tier={spec.tier!r}: must be one of {', '.join(DATASET_TIERS)}")
    source = get_source(spec.source)
    rows, issues = source.load(spec)
    categories = known_categories((*source.extra_categories, *spec.categories))
    issues += validate_rows(
        rows,
        categories=categories,
        tokenizer=tokenizer,
        max_prompt_tokens=spec.max_prompt_tokens,
        field_label=source.field_label(spec),
    )
    where = spec.path or source.default_path
    raise_if_issues(issues, f"{spec.source}:{where}" + (f" ({spec.config})" if spec.config else ""))

    if spec.categories:
        wanted = set(spec.categories)
        present = {row.record["category"] for row in rows}
        missing = sorted(wanted - present)
        if missing:
            raise DatasetError(f"requested categories not in {where}: {', '.join(missing)} (present: {', '.join(sorted(present))})")
        rows = [row for row in rows if row.record["category"] in wanted]

    if spec.tier != "all":
        rows = [row for row in rows if _tier(row.record) == spec.tier]
        if not rows:
            raise DatasetError(f"no prompts of tier {spec.tier!r} in {where}")

    chosen = stratified_select(rows, spec.n_requests, spec.seed, category=lambda row: row.record["category"])
    return [to_request(row, spec) for row in chosen]


def _bucket(row: Row, spec: DatasetSpec) -> str:
    record = row.record
    if record.get("context_bucket"):
        return str(record["context_bucket"])
    path = Path(row.path)
    for name in (spec.config, path.stem, path.parent.name):
        bucket = bucket_from_config(name)
        if bucket:
            return bucket
    return ""


def _tier(record: dict[str, Any]) -> str:
    if record.get("entropy_tier"):
        return str(record["entropy_tier"])
    for key in ("category", "sub_category"):
        tier = TIER_ALIASES.get(str(record.get(key) or ""))
        if tier:
            return tier
    return ""


def to_request(row: Row, spec: DatasetSpec) -> Request:
    record = row.record
    return Request(
        request_id=str(record["question_id"]),
        category=str(record["category"]),
        turns=tuple(record["turns"]),
        max_new_tokens=spec.max_new_tokens,
        sub_category=str(record.get("sub_category") or ""),
        context_bucket=_bucket(row, spec),
        entropy_tier=_tier(record),
        source=str(record.get("source") or spec.source),
    )
