"""Drafters of the reference engine, each a small class behind the name registry."""
from .base import DRAFTERS, Drafter, build_drafter

__all__ = ["DRAFTERS", "Drafter", "build_drafter"]
