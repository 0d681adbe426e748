"""The report: a pure function from results folders to report.md, report.html and PNG plots.

``build_report(paths, out_dir)`` reads the results store (never a live engine), maps the
cells onto the five guidelines of docs/guidelines.md (G1..G5) and renders them. Imports are lazy so
that ``speedbench --help`` stays fast.
"""
from __future__ import annotations


def build_report(paths, out_dir, **kwargs):
    from .build import build_report as _build

    return _build(paths, out_dir, **kwargs)
