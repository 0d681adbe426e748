"""The files shipped in datasets/: valid, complete, and shaped as the benchmark needs."""
import json
from collections import Counter, defaultdict

import pytest

from speedbench.data import QUALITATIVE_CATEGORIES, DatasetSpec, datasets_dir, load_requests, validate_file
from speedbench.data.build import ALL_SIZES, size_tokens
from speedbench.data.errors import DatasetError


def records(name):
    path = datasets_dir() / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_qualitative_validates_and_has_every_category():
    assert validate_file(datasets_dir() / "qualitative.jsonl") == []
    counts = Counter(r["category"] for r in records("qualitative.jsonl"))
    assert set(counts) == set(QUALITATIVE_CATEGORIES)
    assert min(counts.values()) >= 24


def test_multiturn_where_the_category_calls_for_it():
    multi = Counter(r["category"] for r in records("qualitative.jsonl") if len(r["turns"]) > 1)
    assert multi["roleplay"] >= 20 and multi["qa"] >= 5 and multi["rag"] >= 10


def test_multilingual_languages_recorded_in_sub_category():
    langs = Counter(r["sub_category"] for r in records("qualitative.jsonl") if r["category"] == "multilingual")
    assert len(langs) >= 6
    assert {"french", "german", "spanish", "italian", "portuguese", "dutch"} <= set(langs)


def test_long_documents_in_rag_and_summarization():
    for record in records("qualitative.jsonl"):
        if record["category"] in ("rag", "summarization"):
            first = record["turns"][0]
            assert len(first.split()) >= 180 and first.count("\n") >= 5, record["question_id"]


def test_coding_prompts_contain_python_and_metadata_varies():
    data = records("qualitative.jsonl")
    coding = [r for r in data if r["category"] == "coding"]
    assert sum("def " in r["turns"][0] or "class " in r["turns"][0] for r in coding) >= 16
    per_cat = defaultdict(set)
    for r in data:
        per_cat[r["category"]].add(r["difficulty"])
    assert all(len(levels) >= 2 for levels in per_cat.values())
    assert len({r["sub_category"] for r in data}) >= 60


def test_smoke_set_one_short_prompt_per_category():
    data = records("smoke.jsonl")
    assert validate_file(datasets_dir() / "smoke.jsonl") == []
    assert sorted(r["category"] for r in data) == sorted(QUALITATIVE_CATEGORIES)
    assert all(len(r["turns"]) == 1 and len(r["turns"][0]) < 600 for r in data)
    reqs = load_requests(DatasetSpec(path="smoke.jsonl", n_requests=11))
    assert len({r.category for r in reqs}) == 11


def test_readme_documents_format_and_preparation():
    text = (datasets_dir() / "README.md").read_text(encoding="utf-8")
    for needle in ("qualitative.jsonl", "smoke.jsonl", "question_id", "prepare_data.py", "speedbench data build", "speedbench data validate"):
        assert needle in text


@pytest.mark.parametrize("size", ALL_SIZES)
def test_throughput_split_of_every_size_is_shipped_exact_and_tiered(size):
    name = f"throughput/throughput_{size}.jsonl"
    assert validate_file(datasets_dir() / name) == []
    data = records(name)
    assert Counter(r["entropy_tier"] for r in data) == {"low": 2, "mixed": 2, "high": 2}
    assert {(r["context_bucket"], r["prompt_tokens"], r["tokenizer"]) for r in data} == {(size, size_tokens(size), "tiny-target")}
    assert "needle" in {r["sub_category"] for r in data}


@pytest.mark.parametrize("tier", ["low", "mixed", "high"])
def test_dataset_tier_keeps_one_tier(tier):
    every = load_requests(DatasetSpec(path="throughput/throughput_8k.jsonl"))
    kept = load_requests(DatasetSpec(path="throughput/throughput_8k.jsonl", tier=tier))
    assert len(every) == 6 and len(kept) == 2
    assert {r.entropy_tier for r in kept} == {tier} and {r.context_bucket for r in kept} == {"8k"}


def test_dataset_tier_refuses_an_unknown_tier():
    with pytest.raises(DatasetError, match="dataset.tier='medium': must be one of low, mixed, high, all"):
        load_requests(DatasetSpec(path="throughput/throughput_8k.jsonl", tier="medium"))
