"""Experiment loggers: each finished cell goes to a tracker (``logger=none`` | ``logger=wandb``).

Loggers read only the results store (the cell row, its per-request records, the folder's
provenance), so a cell logged live by the runner and one logged later by
``speedbench wandb-log`` look the same. Implementations are imported lazily: wandb is
imported only when ``logger=wandb`` is chosen.
"""
from .base import LOGGERS, CellLogger, NullLogger, build_logger

__all__ = ["LOGGERS", "CellLogger", "NullLogger", "build_logger"]
