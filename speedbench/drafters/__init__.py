"""Drafters of the reference engine, each a small class behind the name registry."""
from .registry import DRAFTERS, build_drafter

__all__ = ["DRAFTERS", "build_drafter"]
