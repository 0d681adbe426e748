"""Engines behind one interface; see ``base.Backend``."""
from .base import BACKENDS, Backend, GenerateOutput, GenerateSpec

__all__ = ["BACKENDS", "Backend", "GenerateOutput", "GenerateSpec"]
