"""Name -> implementation registries with lazy imports.

An entry is either an object or a ``"package.module:attr"`` string imported on first use,
so choosing ``backend=torch`` never imports vLLM. Unknown names fail with the list of
known ones.
"""
from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str, target: Any = None):
        """``register("x", "mod:Cls")`` or as a decorator ``@register("x")``."""
        if target is not None:
            self._entries[name] = target
            return target

        def deco(obj: T) -> T:
            self._entries[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}")
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module), attr)
            self._entries[name] = entry
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries
