"""Every path of a run folder, named once (no pandas: the run edge and the console use it too).

    <results_dir>/
      latest                      symlink to the newest run folder (a one-line file where links fail)
      <run_id>/
        cells/<cell_id>.json        one finished (or failed) cell
        requests/<cell_id>.parquet  per-request records
        steps/<cell_id>.parquet     per-step records
        cells.parquet, cells.csv, cells.jsonl   the cell table
        provenance.json             git SHA, versions, device, resolved config, seeds
        failures.jsonl              attempts that failed where a measured cell was kept (one line each)
        .locks/<cell_id>.lock       the flock of the process measuring that cell
        engine-logs/<name>.log      an engine's or server's own output
        .hydra/                     Hydra's files (``.hydra/run`` for one run, ``.hydra/<job>`` in a sweep)
        wandb/                      W&B offline runs (``logger=wandb``, unless ``logger.dir`` says otherwise)
        microbench/                 ``speedbench microbench`` tables

Nobody else joins these names: ask a :class:`RunFolder` (``ResultsStore`` is one).
"""
from __future__ import annotations

from pathlib import Path

LATEST = "latest"  # <results_dir>/latest: the symlink to the newest run, never a run id
TABLE_FORMATS = ("parquet", "csv", "jsonl")


def wandb_dir(base: str | Path) -> Path:
    """Where W&B puts its offline runs when given ``dir=base`` (the run folder unless ``logger.dir`` is set)."""
    return Path(base) / "wandb"


class RunFolder:
    """The paths of one run folder ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @classmethod
    def of(cls, results_dir: str | Path, run_id: str):
        """The folder of run ``run_id`` in ``results_dir`` (``runlock.run_folder`` checks it stays inside)."""
        return cls(Path(str(results_dir)) / str(run_id))

    # -- per cell ------------------------------------------------------------------------------
    @property
    def cells_dir(self) -> Path:
        return self.root / "cells"

    def cell_path(self, cell_id: str) -> Path:
        return self.cells_dir / f"{cell_id}.json"

    def cell_paths(self) -> list[Path]:
        """Every cell file, sorted by name."""
        return sorted(self.cells_dir.glob("*.json"))

    @property
    def requests_dir(self) -> Path:
        return self.root / "requests"

    def requests_path(self, cell_id: str) -> Path:
        return self.requests_dir / f"{cell_id}.parquet"

    @property
    def steps_dir(self) -> Path:
        return self.root / "steps"

    def steps_path(self, cell_id: str) -> Path:
        return self.steps_dir / f"{cell_id}.parquet"

    def cell_files(self, cell_id: str) -> list[Path]:
        """A cell's files that exist: its records, its steps, then its row (the order merge copies them)."""
        parts = [p for p in (self.requests_path(cell_id), self.steps_path(cell_id)) if p.exists()]
        return parts + [self.cell_path(cell_id)]

    @property
    def written_dirs(self) -> tuple[Path, ...]:
        """The folders atomic writes put temporary files in."""
        return (self.root, self.cells_dir, self.requests_dir, self.steps_dir)

    # -- the whole run -------------------------------------------------------------------------
    def table_path(self, fmt: str = "parquet") -> Path:
        if fmt not in TABLE_FORMATS:
            raise ValueError(f"cell table format {fmt!r}: one of {', '.join(TABLE_FORMATS)}")
        return self.root / f"cells.{fmt}"

    @property
    def provenance_path(self) -> Path:
        return self.root / "provenance.json"

    @property
    def failures_path(self) -> Path:
        """Failed attempts at cells already measured: the measured cell stays, the attempt is a line here."""
        return self.root / "failures.jsonl"

    @property
    def locks_dir(self) -> Path:
        return self.root / ".locks"

    def lock_path(self, cell_id: str) -> Path:
        return self.locks_dir / f"{cell_id}.lock"

    @property
    def engine_logs_dir(self) -> Path:
        return self.root / "engine-logs"

    def engine_log_path(self, name: str) -> Path:
        return self.engine_logs_dir / f"{name}.log"

    @property
    def hydra_dir(self) -> Path:
        return self.root / ".hydra"

    @property
    def hydra_run_dir(self) -> Path:
        """Hydra's output folder of a single run (``conf/config.yaml``: ``hydra.run.dir``)."""
        return self.hydra_dir / "run"

    @property
    def wandb_dir(self) -> Path:
        return wandb_dir(self.root)

    @property
    def microbench_dir(self) -> Path:
        return self.root / "microbench"

    def microbench_path(self, kind: str) -> Path:
        return self.microbench_dir / f"{kind}.parquet"

    def microbench_provenance_path(self, kind: str) -> Path:
        return self.microbench_dir / f"{kind}.provenance.json"

    @property
    def latest_link(self) -> Path:
        """``<results_dir>/latest``, beside this run folder."""
        return self.root.parent / LATEST

    # -- what the folder holds -----------------------------------------------------------------
    @property
    def has_cells(self) -> bool:
        """A results folder of ``speedbench run`` (``cells/`` exists)."""
        return self.cells_dir.is_dir()

    @property
    def has_results(self) -> bool:
        """Anything the report renders: cells or microbenchmark tables."""
        return self.has_cells or self.microbench_dir.is_dir()

    @property
    def fresh(self) -> bool:
        """Nothing of a run written yet (no cells, no provenance)."""
        return not self.cells_dir.exists() and not self.provenance_path.exists()
