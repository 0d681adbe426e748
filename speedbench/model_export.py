"""Model paths as folders on disk, for engines that load ``from_pretrained``-style folders (vLLM, servers).

``random:PRESET`` models exist only in code; :func:`local_dir` writes one (weights + tokenizer,
seeded, so every export is the same model) into a cache folder once and returns the folder.
``builtin:NAME`` resolves to the shipped folder; anything else is returned unchanged.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from . import models


def cache_dir() -> Path:
    root = os.environ.get("SPEEDBENCH_CACHE") or Path.home() / ".cache" / "speedbench"
    return Path(root)


def export(path: str, out_dir: str | Path) -> Path:
    """Save the model and tokenizer named by ``path`` into ``out_dir`` (fp32 weights)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models.load_model(path).save_pretrained(out)
    models.load_tokenizer(path).save_pretrained(out)
    return out


def _fingerprint(preset: str) -> str:
    """Changes when the preset or the libraries that initialise its weights change."""
    import hashlib
    import json

    import torch
    import transformers

    text = json.dumps([models.RANDOM_PRESETS[preset], torch.__version__, transformers.__version__], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def local_dir(path: str) -> str:
    """A folder an engine can load for ``path``; ``random:`` presets are exported once into the cache."""
    if path.startswith("builtin:"):
        return models.resolve_path(path)
    if not path.startswith("random:"):
        return path
    preset = path.split(":", 1)[1]
    if preset not in models.RANDOM_PRESETS:
        raise KeyError(f"unknown random preset {preset!r}; known: {sorted(models.RANDOM_PRESETS)}")
    target = cache_dir() / "random" / f"{preset}-{_fingerprint(preset)}"
    if (target / "config.json").exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{preset}-", dir=target.parent))
    try:
        export(path, tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; its copy is the same model
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
