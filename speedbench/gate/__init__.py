"""The regression gate: configs and verdicts (``core``), paired bootstrap (``stats``), reports (``output``), CLI (``cli``)."""
from .core import GateConfigError, load_config, run_gate

__all__ = ["GateConfigError", "load_config", "run_gate"]
