"""Datasets for speedbench: SPEED-Bench-format records -> ``speedbench.records.Request``.

Public API::

    from speedbench.data import DatasetSpec, load_requests, render_conversation
    requests = load_requests(DatasetSpec(source="local", path="qualitative.jsonl", n_requests=44))

Heavy libraries (``datasets``, ``transformers``) are imported only when needed.
"""
from .chat import render_conversation
from .errors import DatasetError, Issue
from .loader import load_requests
from .selection import stratified_select
from .sources import SOURCES
from .spec import QUALITATIVE_CATEGORIES, THROUGHPUT_CATEGORIES, DatasetSpec, datasets_dir, resolve_path
from .validate import check_file, validate_file

__all__ = [
    "DatasetError",
    "DatasetSpec",
    "Issue",
    "QUALITATIVE_CATEGORIES",
    "SOURCES",
    "THROUGHPUT_CATEGORIES",
    "check_file",
    "datasets_dir",
    "load_requests",
    "render_conversation",
    "resolve_path",
    "stratified_select",
    "validate_file",
]
