"""What one imported result file holds, tool-independent (each reader fills a :class:`ToolRun`)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..console import UsageError

NAN = math.nan
STATS = ("mean", "p50", "p90", "p99")
METRICS = ("ttft", "tpot", "itl", "e2e")  # the latency columns ``<metric>_ms_<stat>_<role>`` (columns.load)


class InputFileError(UsageError):
    """A result file that cannot be imported: one line naming the file and the field (exit 2)."""


def fail(path: Path | str, field_name: str, what: str) -> InputFileError:
    return InputFileError(f"{path}: field {field_name!r}: {what}")


@dataclass(frozen=True)
class ImportedRequest:
    """One request as the tool recorded it (seconds; -1 where the tool does not say)."""

    key: str  # pairs a baseline request with the speculative one on the same prompt
    prompt_tokens: int
    n_tokens: int
    ttft: float
    e2e: float
    tpot: float
    itls: tuple[float, ...] = ()
    t_start: float = NAN  # seconds from the run's first send
    error: str = ""
    drafts: int = -1  # verification steps with a draft (per-request spec metrics), -1: not known
    drafted: int = -1
    accepted: int = -1


@dataclass(frozen=True)
class SpecSummary:
    """The speculative-decoding section as the tool printed it."""

    al: float  # pooled: 1 + accepted / drafts
    acceptance_rate: float = NAN  # accepted / drafted, a fraction
    per_pos: tuple[float, ...] = ()  # unconditional P(draft k accepted), fractions
    drafts: int = -1
    drafted: int = -1
    accepted: int = -1
    al_request_mean: float = NAN
    hist: tuple[int, ...] = ()  # steps that accepted exactly k drafts
    num_speculative_tokens: int = 0  # K as the file shows it (per-position entries / histogram); 0: not shown


@dataclass(frozen=True)
class ToolRun:
    """One result file: the load point, what must match its pair, the summary as printed, the requests."""

    path: Path
    tool: str
    version: str
    model: str
    concurrency: int  # -1: not set (open loop only)
    request_rate: float  # inf: closed loop
    identity: dict[str, Any]  # field -> value that the other file of a pair must match
    summary: dict[str, float]  # "<metric>_ms_<stat>", "output_tok_s", "requests_s"
    requests: tuple[ImportedRequest, ...] = ()
    spec: SpecSummary | None = None
    n_completed: int = 0
    n_failed: int = 0
    duration_s: float = NAN
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return f"{self.tool} {self.version}"


def read_json(path: Path) -> Any:
    """A JSON file, or a one-line error naming it (truncated, not JSON, unreadable)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not a UTF-8 text file ({exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: not a whole JSON document (truncated or malformed at line {exc.lineno} "
                           f"column {exc.colno}: {exc.msg})") from exc


def number(path, data: dict, key: str, required: bool = True) -> float:
    """``data[key]`` as a float; missing and ``required``: an error naming it; missing otherwise: NaN."""
    if key not in data or data[key] is None:
        if required:
            raise fail(path, key, "missing")
        return NAN
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(path, key, f"must be a number, got {v!r}")
    return float(v)


def number_list(path, data: dict, key: str, n: int | None = None) -> list | None:
    """``data[key]`` as a list (None when absent); wrong type or length: an error naming it."""
    if key not in data or data[key] is None:
        return None
    v = data[key]
    if not isinstance(v, list):
        raise fail(path, key, f"must be a list, got {type(v).__name__}")
    if n is not None and len(v) != n:
        raise fail(path, key, f"has {len(v)} entries, expected {n} (one per request)")
    return v
