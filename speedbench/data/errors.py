"""Problems found in a dataset file, and the error that reports all of them at once."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Issue:
    """One problem in one record: where it is (file, line, field) and what is wrong.

    ``line`` is the 1-based line of a JSONL file or the 1-based row of a Parquet file /
    hub split; 0 means the problem concerns the whole file.
    """

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DatasetError(ValueError):
    """A dataset cannot be used. Lists every problem found, not just the first."""

    def __init__(self, message: str, issues: list[Issue] | tuple[Issue, ...] = ()):
        self.issues = tuple(issues)
        if self.issues:
            shown = "\n".join(f"  - {issue}" for issue in self.issues[:50])
            more = len(self.issues) - 50
            if more > 0:
                shown += f"\n  ... and {more} more"
            message = f"{message} ({len(self.issues)} problem(s)):\n{shown}"
        super().__init__(message)
