"""The logger interface and its name registry."""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path

from ..config import LoggerConfig
from ..records import CellResult
from ..registry import Registry
from ..results.store import ResultsStore

log = logging.getLogger(__name__)


class CellLogger(ABC):
    """Logs finished cells. A logging failure is reported and never ends the sweep."""

    def __init__(self, cfg: LoggerConfig, root: Path) -> None:
        self.cfg = cfg
        self.root = Path(root)

    def log_cell(self, cell: CellResult, store: ResultsStore) -> None:
        try:
            self.log_cell_id(cell.cell_id, store)
        except Exception:  # the measurement is safe on disk; `speedbench wandb-log` can retry
            log.exception("logger %s: could not log cell %s", self.cfg.name, cell.cell_id)

    @abstractmethod
    def log_cell_id(self, cell_id: str, store: ResultsStore) -> None:
        """Log the cell ``cell_id`` as written in ``store``."""

    def close(self) -> None:  # noqa: B027 - optional
        pass


class NullLogger(CellLogger):
    def log_cell_id(self, cell_id: str, store: ResultsStore) -> None:
        pass


LOGGERS: Registry[type[CellLogger]] = Registry("logger")
LOGGERS.register("none", NullLogger)
LOGGERS.register("wandb", "speedbench.loggers.wandb_logger:WandbLogger")


def build_logger(cfg: LoggerConfig, root: str | Path) -> CellLogger:
    """The logger named by ``cfg.name`` for the results folder ``root``."""
    return LOGGERS.get(cfg.name)(cfg, Path(root))
