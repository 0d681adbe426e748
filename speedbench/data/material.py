"""Natural text used to pad throughput prompts: never random tokens.

Sources, all local:
* ``datasets/filler/*.txt`` - paragraphs written for this project;
* ``datasets/qualitative.jsonl`` - English prompt text of the project's own suite;
* the Python standard library of the running interpreter (found with ``sysconfig``):
  module source code, docstrings and the names it defines.

Builds are deterministic for a given tokenizer, seed, repository content and Python version.
"""
from __future__ import annotations

import ast
import inspect
import json
import re
import sysconfig
from functools import lru_cache
from pathlib import Path

from .spec import datasets_dir

SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "turtledemo", "ensurepip", "__pycache__", "pydoc_data", "encodings"}
MIN_FILE_BYTES, MAX_FILE_BYTES = 3_000, 250_000
MIN_DOCSTRING_CHARS = 160
ENGLISH_CATEGORIES = {"humanities", "qa", "rag", "stem", "summarization", "writing", "reasoning"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@lru_cache(maxsize=1)
def stdlib_files() -> tuple[Path, ...]:
    """Pure-Python standard library modules of a useful size, in a stable order."""
    root = stdlib_root()
    found = []
    for path in root.rglob("*.py"):
        parts = set(path.relative_to(root).parts[:-1])
        if parts & SKIP_DIRS or path.name.startswith("test_"):
            continue
        size = path.stat().st_size
        if MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
            found.append(path)
    return tuple(sorted(found, key=lambda p: p.relative_to(root).as_posix()))


def stdlib_name(path: Path) -> str:
    """``json/decoder.py`` style name (no machine-specific prefix)."""
    return path.relative_to(stdlib_root()).as_posix()


@lru_cache(maxsize=None)
def read_source(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module | None:
    try:
        return ast.parse(read_source(path))
    except (SyntaxError, ValueError):
        return None


@lru_cache(maxsize=None)
def docstrings(path: Path) -> tuple[str, ...]:
    """Docstrings of the module, its classes and functions (long enough to read as prose)."""
    tree = _parsed(path)
    if tree is None:
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= MIN_DOCSTRING_CHARS:
                found.append(inspect.cleandoc(doc))
    return tuple(found)


@lru_cache(maxsize=None)
def defined_names(path: Path) -> tuple[str, ...]:
    """Dotted names of the classes, functions and methods a module defines."""
    tree = _parsed(path)
    if tree is None:
        return ()
    module = stdlib_name(path).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(f"{module}.{node.name}")
            if isinstance(node, ast.ClassDef):
                names.extend(
                    f"{module}.{node.name}.{item.name}"
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
    return tuple(names)


def _paragraphs(text: str, min_chars: int = 200) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= min_chars]


@lru_cache(maxsize=1)
def project_paragraphs() -> tuple[str, ...]:
    """Paragraphs written for the project: filler files plus English prompt text."""
    root = datasets_dir()
    found: list[str] = []
    for path in sorted((root / "filler").glob("*.txt")):
        found.extend(_paragraphs(path.read_text(encoding="utf-8")))
    suite = root / "qualitative.jsonl"
    if suite.exists():
        for line in suite.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("category") in ENGLISH_CATEGORIES:
                for turn in record.get("turns", []):
                    found.extend(_paragraphs(turn))
    return tuple(found)


def sentences(paragraph: str) -> list[str]:
    """Split prose into sentences (good enough for natural, well-punctuated text)."""
    flat = " ".join(paragraph.split())
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'])", flat) if len(s) > 20]
