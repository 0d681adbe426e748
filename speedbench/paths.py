"""Where the shipped configuration and prompt sets live, installed or in a checkout.

A wheel (``pip install .`` or ``pip install speedbench-*.whl``) carries the repository's
top-level ``conf/`` and ``datasets/`` inside the package, as ``speedbench/conf`` and
``speedbench/datasets`` (``setup.py`` copies them at build time). A source checkout (and an
editable install of it) reads the top-level folders directly. Nothing here looks at the
folder *next to* the installed package, which in ``site-packages`` would be other
distributions (``site-packages/datasets`` is the Hugging Face ``datasets`` library).
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def source_root() -> Path | None:
    """The repository root when the package runs from a checkout, else None."""
    root = PACKAGE_DIR.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "speedbench"' in pyproject.read_text(encoding="utf-8", errors="replace"):
        return root
    return None


def shipped_dir(name: str) -> Path:
    """``speedbench/<name>`` of an installed wheel, else ``<checkout>/<name>``.

    Returns the in-package path (which may not exist) when neither is there, so error
    messages name the place a wheel would have it.
    """
    inside = PACKAGE_DIR / name
    if inside.is_dir():
        return inside
    root = source_root()
    if root is not None and (root / name).is_dir():
        return root / name
    return inside


def conf_dir() -> Path:
    """The shipped Hydra configuration (``config.yaml`` and one folder per group)."""
    return shipped_dir("conf")


def gate_conf_dir() -> Path:
    """The shipped gate tolerances (``default.yaml``, ``ci.yaml``)."""
    return conf_dir() / "gate"


def datasets_dir() -> Path:
    """The shipped prompt sets (``qualitative.jsonl``, ``smoke.jsonl``, filler text, splits)."""
    return shipped_dir("datasets")
