"""Stratified, seeded selection of N requests across categories."""
from __future__ import annotations

import random
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def stratified_select(
    items: Sequence[T],
    n: int | None,
    seed: int,
    category: Callable[[T], str],
) -> list[T]:
    """Pick ``n`` items round-robin over the sorted categories.

    Each category's items are shuffled with a generator seeded by ``(seed, category)``, so
    a category's order does not depend on which other categories are present. Counts per
    category differ by at most one while every category still has items left; a category
    that runs out is skipped. ``n=None`` keeps all items in file order; ``n`` larger than
    the number of items returns all of them in round-robin order.
    """
    if n is None:
        return list(items)
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(category(item), []).append(item)
    queues = []
    for name in sorted(groups):
        members = list(groups[name])
        random.Random(f"{seed}:{name}").shuffle(members)
        queues.append(members)
    picked: list[T] = []
    depth = 0
    while len(picked) < n and any(depth < len(q) for q in queues):
        for queue in queues:
            if depth < len(queue) and len(picked) < n:
                picked.append(queue[depth])
        depth += 1
    return picked
