"""The cell columns, declared once: one frozen, keyword-only dataclass per metric group, each field
with its default (NaN, -1, (), "", False: what a cell that measured nothing holds).

``metrics/<group>`` fills its group (``metrics.timing.timing_columns`` returns a ``TimingColumns``);
``records.CellResult`` is the identity plus every group plus the protocol's own columns, so a column
is added by one field here and one line in the metric that computes it. This package imports
nothing else from speedbench: every layer may read it.
"""
from .acceptance import AcceptanceColumns
from .agreement import AgreementColumns
from .degenerate import DegenerateColumns
from .load import LoadPointColumns, load_label
from .prediction import PredictionColumns
from .speedup import SpeedupColumns
from .timing import TimingColumns

GROUPS = (AcceptanceColumns, TimingColumns, SpeedupColumns, PredictionColumns, AgreementColumns, DegenerateColumns,
          LoadPointColumns)  # in the cell row's column order

__all__ = ["GROUPS", "AcceptanceColumns", "AgreementColumns", "DegenerateColumns", "LoadPointColumns", "PredictionColumns",
           "SpeedupColumns", "TimingColumns", "load_label"]
