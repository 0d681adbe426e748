"""Stable short ids from values: cell ids, backend cache keys, W&B run ids (never change the rule:
ids already written in results folders and W&B projects depend on it)."""
from __future__ import annotations

import hashlib
import json


def stable_hash(obj) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
