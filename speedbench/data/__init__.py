"""Prompt loading (minimal local JSONL loader; the full suite and loaders land with the data issue)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..records import Request

DATASETS_DIR = Path(__file__).resolve().parents[2] / "datasets"


@dataclass(frozen=True)
class DatasetSpec:
    source: str = "local"
    path: str = "smoke.jsonl"
    config: str | None = None
    split: str = "test"
    categories: tuple[str, ...] = ()
    n_requests: int | None = None
    seed: int = 0
    max_new_tokens: int = 64
    column_map: dict = field(default_factory=dict)
    max_prompt_tokens: int | None = None


def _resolve(path: str) -> Path:
    p = Path(path)
    if p.exists():
        return p
    if (DATASETS_DIR / p).exists():
        return DATASETS_DIR / p
    raise FileNotFoundError(f"dataset.path {path!r} not found (looked in . and {DATASETS_DIR})")


def load_requests(spec: DatasetSpec) -> list[Request]:
    path = _resolve(spec.path)
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if spec.categories and rec["category"] not in spec.categories:
            continue
        out.append(Request(str(rec["question_id"]), rec["category"], tuple(rec["turns"]), spec.max_new_tokens))
    return out[: spec.n_requests] if spec.n_requests else out
