"""Stratified selection: balanced across categories and reproducible for a seed."""
from collections import Counter

from speedbench.data import stratified_select

ITEMS = [(cat, i) for cat, n in (("a", 10), ("b", 10), ("c", 10), ("d", 3)) for i in range(n)]


def pick(n, seed=0, items=ITEMS):
    return stratified_select(items, n, seed, category=lambda item: item[0])


def test_balanced_when_every_category_has_enough():
    for n in range(1, 13):
        counts = Counter(cat for cat, _ in pick(n))
        assert sum(counts.values()) == n
        assert max(counts.values()) - min(counts.values()) <= 1
    assert Counter(cat for cat, _ in pick(8)) == {"a": 2, "b": 2, "c": 2, "d": 2}


def test_round_robin_order_over_sorted_categories():
    assert [cat for cat, _ in pick(8)] == ["a", "b", "c", "d"] * 2


def test_small_category_runs_out_then_others_continue():
    counts = Counter(cat for cat, _ in pick(24))
    assert counts == {"a": 7, "b": 7, "c": 7, "d": 3}


def test_reproducible_and_seed_dependent():
    assert pick(10, seed=3) == pick(10, seed=3)
    assert pick(10, seed=3) != pick(10, seed=4)


def test_category_order_independent_of_other_categories():
    without_d = [item for item in ITEMS if item[0] != "d"]
    a_full = [item for item in pick(40) if item[0] == "a"]
    a_without = [item for item in pick(40, items=without_d) if item[0] == "a"]
    assert a_full == a_without


def test_none_keeps_file_order_and_large_n_returns_all():
    assert pick(None) == ITEMS
    assert sorted(pick(1000)) == sorted(ITEMS)
    assert pick(0) == []
