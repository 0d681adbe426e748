"""Where records come from. Each source turns its input into SPEED-Bench records.

``SOURCES`` maps a ``DatasetSpec.source`` name to a loader class; add a class there to
support a new format.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, ClassVar

from .errors import DatasetError, Issue
from .spec import DatasetSpec, datasets_dir, resolve_path
from .validate import Row, read_file_rows

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class Source:
    """Base loader: reads JSONL/Parquet files that already hold SPEED-Bench records."""

    name: ClassVar[str] = "local"
    extra_categories: ClassVar[tuple[str, ...]] = ()  # accepted on top of the known ones
    default_path: ClassVar[str] = ""

    def load(self, spec: DatasetSpec) -> tuple[list[Row], list[Issue]]:
        rows, issues = read_file_rows(self.locate(spec))
        return [Row(r.path, r.line, self.normalize(r.record, r, spec)) for r in rows], issues

    def locate(self, spec: DatasetSpec) -> Path:
        path = spec.path or self.default_path
        if not path:
            raise DatasetError(f"dataset source {self.name!r} needs dataset.path")
        found = resolve_path(path)
        if found.is_dir() and spec.config:
            for candidate in (found / f"{spec.config}.jsonl", found / f"{spec.config}.parquet", found / spec.config):
                if candidate.exists():
                    return candidate
        return found

    def normalize(self, record: Any, row: Row, spec: DatasetSpec) -> Any:
        return record

    def field_label(self, spec: DatasetSpec) -> Callable[[str], str]:
        return str


class LocalSource(Source):
    """Local JSONL/Parquet in SPEED-Bench format (the default; e.g. datasets/qualitative.jsonl)."""

    name = "local"
    default_path = "qualitative.jsonl"


class QuestionJsonlSource(Source):
    """``question.jsonl`` files (question_id, category, turns) as used by MT-Bench / Spec-Bench."""

    def normalize(self, record: Any, row: Row, spec: DatasetSpec) -> Any:
        if isinstance(record, dict) and not record.get("source"):
            record = {**record, "source": self.name}
        return record


class SpecBenchSource(QuestionJsonlSource):
    """Spec-Bench ``data/spec_bench/question.jsonl`` (480 questions: MT-Bench 80 + translation,
    summarization, qa, math_reasoning, rag)."""

    name = "spec_bench"
    extra_categories = ("extraction", "translation", "math_reasoning")


class MTBenchSource(QuestionJsonlSource):
    """MT-Bench ``question.jsonl`` (80 two-turn questions, 8 categories)."""

    name = "mt_bench"
    extra_categories = ("extraction",)


class GenericSource(Source):
    """Any JSONL/Parquet file; ``spec.column_map`` maps its columns to record fields, e.g.
    ``{"prompt": "turns", "id": "question_id", "category": "category"}``. A string prompt
    becomes a single turn; a missing id becomes ``<file stem>-<line>``; a missing category
    becomes ``generic``."""

    name = "generic"
    extra_categories = ("generic",)

    def normalize(self, record: Any, row: Row, spec: DatasetSpec) -> Any:
        if not isinstance(record, dict):
            return record
        targets = set(spec.column_map.values())
        out = {k: v for k, v in record.items() if k not in targets and k not in spec.column_map}
        for column, target in spec.column_map.items():
            if column in record:
                out[target] = record[column]
        if isinstance(out.get("turns"), str):
            out["turns"] = [out["turns"]]
        out.setdefault("question_id", f"{Path(row.path).stem}-{row.line}")
        out.setdefault("category", "generic")
        out.setdefault("source", "generic")
        return out

    def field_label(self, spec: DatasetSpec) -> Callable[[str], str]:
        origin = {target: column for column, target in spec.column_map.items()}

        def label(field: str) -> str:
            base, sep, index = field.partition("[")
            if base in origin and origin[base] != base:
                return f"{origin[base]}{sep}{index} (mapped to {field})"
            return field

        return label


class SpeedBenchSource(Source):
    """``nvidia/SPEED-Bench``: a prepared local copy (Parquet/JSONL file or folder, e.g. the
    output of the SPEED-Bench prepare step) or, if ``path`` is a hub id, the hub dataset via
    ``datasets.load_dataset(path, config, split=split)``. Prompts still holding the hub
    placeholder fail validation with instructions to prepare the data."""

    name = "speed_bench"
    default_path = "nvidia/SPEED-Bench"

    def load(self, spec: DatasetSpec) -> tuple[list[Row], list[Issue]]:
        path = spec.path or self.default_path
        if self._is_local(path):
            return super().load(spec)
        if not HUB_ID.match(path):
            resolve_path(path)  # raises a not-found error naming the places looked at
        return self._load_hub(path, spec), []

    @staticmethod
    def _is_local(path: str) -> bool:
        given = Path(path).expanduser()
        return given.exists() or (not given.is_absolute() and (datasets_dir() / given).exists())

    def _load_hub(self, repo: str, spec: DatasetSpec) -> list[Row]:
        import datasets

        config = spec.config or "qualitative"
        table = datasets.load_dataset(repo, config, split=spec.split)
        label = f"{repo}[{config}/{spec.split}]"
        return [Row(label, i, dict(record)) for i, record in enumerate(table, start=1)]


class AgenticSource(Source):
    """Agentic trajectories (``data.agentic``): each JSONL record is cut before every assistant turn
    into one request holding the trajectory so far (e.g. datasets/agentic/mini.jsonl)."""

    name = "agentic"
    extra_categories = ("agentic",)
    default_path = "agentic/mini.jsonl"

    def load(self, spec: DatasetSpec) -> tuple[list[Row], list[Issue]]:
        from .agentic import cuts

        rows, issues = read_file_rows(self.locate(spec))
        out: list[Row] = []
        for r in rows:
            records, bad = cuts(r.record, r.path, r.line)
            issues += bad
            out += [Row(r.path, r.line, rec) for rec in records]
        return out, issues


SOURCES: dict[str, type[Source]] = {
    cls.name: cls for cls in (LocalSource, SpeedBenchSource, SpecBenchSource, MTBenchSource, GenericSource,
                              AgenticSource)
}


def get_source(name: str) -> Source:
    try:
        return SOURCES[name]()
    except KeyError:
        raise DatasetError(f"unknown dataset source {name!r} (known: {', '.join(sorted(SOURCES))})") from None
