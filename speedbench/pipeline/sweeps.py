"""Sweep-level verdicts, read from a results folder.

In a multirun every job measures its own cells, possibly in its own process (submitit,
Slurm), so no single job sees the whole sweep. The verdict below is computed once, after
all jobs ended, from the cells every job wrote into the shared results folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..records import STATUS_OK
from ..results.store import ResultsStore


@dataclass(frozen=True)
class SweepVerdict:
    root: str
    n_cells: int
    n_failed: int
    allowed_failure_frac: float

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
            f"sweep {self.root}: {self.n_failed} of {self.n_cells} cells failed ({self.failure_frac:.0%}), "
            f"{verb} sweep.allowed_failure_frac={self.allowed_failure_frac:g}"
        )


def sweep_verdict(root: str | Path, allowed_failure_frac: float) -> SweepVerdict:
    """Failed cells over all cells of the results folder (cells resumed from earlier runs included)."""
    table = ResultsStore(root).cells()
    n_failed = int((table["status"] != STATUS_OK).sum()) if not table.empty else 0
    return SweepVerdict(str(root), len(table), n_failed, allowed_failure_frac)
