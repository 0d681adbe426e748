"""The one failure-fraction verdict: ``sweep.allowed_failure_frac`` against the failed cells.

A single run judges the cells it measured; a sweep judges every cell of its results folder
once all jobs ended (cells resumed from earlier runs included), since no job sees the others.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..records import STATUS_OK
from ..results.store import ResultsStore


@dataclass(frozen=True)
class Verdict:
    root: str
    n_cells: int
    n_failed: int
    allowed_failure_frac: float
    scope: str = "sweep"  # "sweep": every cell of the folder; "run": the cells this run measured

    @property
    def failure_frac(self) -> float:
        return self.n_failed / self.n_cells if self.n_cells else 0.0

    @property
    def ok(self) -> bool:
        return self.failure_frac <= self.allowed_failure_frac

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def message(self) -> str:
        verb = "within" if self.ok else "beyond"
        return (
            f"{self.scope} {self.root}: {self.n_failed} of {self.n_cells} cells failed ({self.failure_frac:.0%}), "
            f"{verb} sweep.allowed_failure_frac={self.allowed_failure_frac:g}"
        )


def of_statuses(root: str | Path, statuses: Iterable[str], allowed_failure_frac: float, scope: str) -> Verdict:
    statuses = list(statuses)
    return Verdict(str(root), len(statuses), sum(s != STATUS_OK for s in statuses), allowed_failure_frac, scope)


def of_folder(root: str | Path, allowed_failure_frac: float) -> Verdict:
    """The sweep's verdict: failed cells over all cells of the results folder."""
    table = ResultsStore(root).cells()
    return of_statuses(root, [] if table.empty else table["status"], allowed_failure_frac, "sweep")
