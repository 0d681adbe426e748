"""Results folders: the atomic store (``store``), provenance (``provenance``), merging (``merge``)."""
from .store import ResultsStore

__all__ = ["ResultsStore"]
