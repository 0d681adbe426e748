"""What to load: the ``DatasetSpec`` and where relative paths are looked up."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DatasetError

# The 11 SPEED-Bench qualitative categories.
QUALITATIVE_CATEGORIES: tuple[str, ...] = (
    "coding",
    "humanities",
    "math",
    "multilingual",
    "qa",
    "rag",
    "reasoning",
    "roleplay",
    "stem",
    "summarization",
    "writing",
)

# Category names used by throughput splits (one per entropy tier).
THROUGHPUT_CATEGORIES: tuple[str, ...] = ("low_entropy", "mixed", "high_entropy")

# Spellings of an entropy tier that may appear in category / sub_category -> Request.entropy_tier.
TIER_ALIASES: dict[str, str] = {
    "low": "low",
    "low_entropy": "low",
    "mixed": "mixed",
    "mixed_entropy": "mixed",
    "high": "high",
    "high_entropy": "high",
}

ENTROPY_TIERS: tuple[str, ...] = ("low", "mixed", "high")
# ``dataset.tier``: one entropy tier, or every prompt.
DATASET_TIERS: tuple[str, ...] = (*ENTROPY_TIERS, "all")


def datasets_dir() -> Path:
    """The shipped prompt sets: ``speedbench/datasets`` in a wheel, ``datasets/`` in a checkout
    (never a same-named folder next to the package, e.g. the ``datasets`` library)."""
    from speedbench.paths import datasets_dir as shipped

    return shipped()


def resolve_path(path: str | Path) -> Path:
    """Find a dataset path: as given (absolute or relative to the current directory),
    then relative to the shipped prompt sets (``datasets/smoke.jsonl`` and ``smoke.jsonl``
    both name the shipped smoke set)."""
    given = Path(path).expanduser()
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, datasets_dir() / given]
    if not given.is_absolute() and given.parts[:1] == ("datasets",) and len(given.parts) > 1:
        candidates.append(datasets_dir().joinpath(*given.parts[1:]))
    for candidate in candidates:
        if candidate.exists():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise DatasetError(f"dataset path {str(path)!r} not found (looked in: {tried})")


def bucket_from_config(config: str | None) -> str:
    """``"throughput_8k"`` -> ``"8k"``; anything else -> ``""``."""
    if config and config.startswith("throughput_"):
        return config.removeprefix("throughput_")
    return ""


@dataclass(frozen=True)
class DatasetSpec:
    """Which prompts a run uses.

    source: a name registered in ``speedbench.data.sources.SOURCES``
        ("local" | "speed_bench" | "spec_bench" | "mt_bench" | "generic").
    path: a file or folder (relative paths: current directory first, then ``datasets/``);
        for "speed_bench" a hub id or a prepared local copy. Empty = the source's default
        ("local": ``qualitative.jsonl``; "speed_bench": ``nvidia/SPEED-Bench``).
    config: e.g. "qualitative", "throughput_1k" (SPEED-Bench config, or a file stem inside
        a local folder).
    split: hub split (SPEED-Bench ships "test").
    categories: keep only these categories (empty = all); they also count as known
        categories during validation.
    n_requests: how many requests to select (stratified over categories); None = all.
    seed: seed of the stratified selection.
    max_new_tokens: generation budget copied into every Request.
    column_map: for "generic": source column -> record field, e.g.
        {"prompt": "turns", "id": "question_id", "category": "category"}.
    max_prompt_tokens: if set (and a tokenizer is given to the loader) longer prompts are
        reported as errors before any model runs.
    tier: "low" | "mixed" | "high" keeps only prompts of that entropy tier (the record's
        ``entropy_tier``, else its category spelled as a tier); "all" keeps every prompt.
    """

    source: str = "local"
    path: str = ""
    config: str | None = None
    split: str = "test"
    categories: tuple[str, ...] = ()
    n_requests: int | None = None
    seed: int = 0
    max_new_tokens: int = 256
    column_map: dict[str, str] = field(default_factory=dict)
    max_prompt_tokens: int | None = None
    tier: str = "all"

    def __post_init__(self) -> None:
        # Accept lists / OmegaConf containers from config files.
        cats = self.categories
        if isinstance(cats, str):
            cats = (cats,) if cats else ()
        object.__setattr__(self, "categories", tuple(str(c) for c in cats))
        object.__setattr__(self, "column_map", {str(k): str(v) for k, v in dict(self.column_map).items()})
        if self.n_requests is not None and int(self.n_requests) < 0:
            raise DatasetError(f"n_requests must be >= 0 or None, got {self.n_requests}")
        if self.max_new_tokens <= 0:
            raise DatasetError(f"max_new_tokens must be > 0, got {self.max_new_tokens}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "DatasetSpec":
        """Build from a plain mapping (e.g. a Hydra/OmegaConf node), ignoring unknown keys."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in dict(values).items() if k in known})
