"""Loaders for every supported format, on small local files (never the hub)."""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from speedbench.data import SOURCES, DatasetError, DatasetSpec, load_requests, resolve_path
from speedbench.records import Request

SPEED_ROWS = [
    {"question_id": f"{cat}-{i}", "category": cat, "sub_category": "s", "turns": [f"{cat} question {i}"], "source": "x",
     "src_id": "", "difficulty": "easy", "multiturn": False}
    for cat in ("coding", "math", "writing") for i in range(4)
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_registry_has_every_source():
    assert set(SOURCES) == {"local", "speed_bench", "spec_bench", "mt_bench", "generic", "agentic"}
    with pytest.raises(DatasetError, match="unknown dataset source 'nope'"):
        load_requests(DatasetSpec(source="nope", path="x.jsonl"))


def test_local_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", SPEED_ROWS)
    reqs = load_requests(DatasetSpec(source="local", path=str(path), max_new_tokens=77))
    assert len(reqs) == 12 and all(isinstance(r, Request) for r in reqs)
    first = reqs[0]
    assert (first.request_id, first.category, first.turns, first.max_new_tokens) == ("coding-0", "coding", ("coding question 0",), 77)
    assert first.context_bucket == "" and first.entropy_tier == "" and first.source == "x"


def test_local_parquet_equals_jsonl(tmp_path):
    jsonl = load_requests(DatasetSpec(path=str(write_jsonl(tmp_path / "q.jsonl", SPEED_ROWS))))
    parquet = load_requests(DatasetSpec(path=str(write_parquet(tmp_path / "q.parquet", SPEED_ROWS))))
    assert parquet == jsonl


def test_local_parquet_errors_name_the_row(tmp_path):
    rows = [dict(r) for r in SPEED_ROWS]
    rows[5]["category"] = "cooking"
    path = write_parquet(tmp_path / "q.parquet", rows)
    with pytest.raises(DatasetError, match=r"q\.parquet:6: category: unknown category 'cooking'"):
        load_requests(DatasetSpec(path=str(path)))


def test_local_folder_with_config(tmp_path):
    write_jsonl(tmp_path / "qualitative.jsonl", SPEED_ROWS)
    write_jsonl(tmp_path / "other.jsonl", SPEED_ROWS[:1])
    reqs = load_requests(DatasetSpec(path=str(tmp_path), config="qualitative"))
    assert len(reqs) == 12


def test_categories_filter_and_selection(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", SPEED_ROWS)
    reqs = load_requests(DatasetSpec(path=str(path), categories=["math", "writing"], n_requests=3, seed=1))
    assert [r.category for r in reqs] == ["math", "writing", "math"]
    again = load_requests(DatasetSpec(path=str(path), categories=("math", "writing"), n_requests=3, seed=1))
    assert reqs == again
    with pytest.raises(DatasetError, match="requested categories not in .*: stem"):
        load_requests(DatasetSpec(path=str(path), categories=("math", "stem")))


def test_requested_category_extends_known_ones(tmp_path):
    rows = [{"question_id": "a", "category": "cooking", "turns": ["How long to boil an egg?"]}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(DatasetError):
        load_requests(DatasetSpec(path=str(path)))
    assert load_requests(DatasetSpec(path=str(path), categories=("cooking",)))[0].category == "cooking"


def test_throughput_fields_map_to_request(tmp_path):
    rows = [
        {"question_id": "t1", "category": "low_entropy", "sub_category": "code_continue", "turns": ["x"],
         "context_bucket": "1k", "entropy_tier": "low", "prompt_tokens": 1000},
        {"question_id": "t2", "category": "high_entropy", "turns": ["y"]},  # tier from category, bucket from file name
    ]
    path = write_jsonl(tmp_path / "throughput_8k.jsonl", rows)
    a, b = load_requests(DatasetSpec(path=str(path)))
    assert (a.context_bucket, a.entropy_tier) == ("1k", "low")
    assert (b.context_bucket, b.entropy_tier) == ("8k", "high")


def test_spec_bench_question_jsonl(tmp_path):
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Write a travel blog post.", "Rewrite it starting every sentence with A."]},
        {"question_id": 161, "category": "translation", "turns": ["Translate: Bonjour."]},
        {"question_id": 201, "category": "math_reasoning", "turns": ["2+2?"]},
        {"question_id": 301, "category": "extraction", "turns": ["Extract the names."], "reference": ["x"]},
    ]
    path = write_jsonl(tmp_path / "question.jsonl", rows)
    reqs = load_requests(DatasetSpec(source="spec_bench", path=str(path)))
    assert [r.request_id for r in reqs] == ["81", "161", "201", "301"]
    assert reqs[0].multiturn and reqs[0].source == "spec_bench"
    # the same file is not valid SPEED-Bench: translation/math_reasoning are Spec-Bench categories
    with pytest.raises(DatasetError, match="translation"):
        load_requests(DatasetSpec(source="local", path=str(path)))


def test_mt_bench_question_jsonl(tmp_path):
    rows = [
        {"question_id": 101, "category": "reasoning", "turns": ["Who is taller?", "Why?"]},
        {"question_id": 131, "category": "extraction", "turns": ["List the dates.", "Now as JSON."]},
    ]
    path = write_jsonl(tmp_path / "question.jsonl", rows)
    reqs = load_requests(DatasetSpec(source="mt_bench", path=str(path)))
    assert [r.category for r in reqs] == ["reasoning", "extraction"]
    assert all(r.multiturn and r.source == "mt_bench" for r in reqs)


def test_mt_bench_bad_turns_reported(tmp_path):
    path = write_jsonl(tmp_path / "question.jsonl", [{"question_id": 1, "category": "writing", "turns": "oops"}])
    with pytest.raises(DatasetError, match=r"question\.jsonl:1: turns: must be a list"):
        load_requests(DatasetSpec(source="mt_bench", path=str(path)))


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_generic_with_column_map(tmp_path, suffix):
    rows = [
        {"id": "p1", "prompt": "Tell me a joke.", "kind": "writing", "extra": 1},
        {"id": "p2", "prompt": "What is 2+2?", "kind": "math", "extra": 2},
    ]
    path = tmp_path / f"prompts.{suffix}"
    (write_jsonl if suffix == "jsonl" else write_parquet)(path, rows)
    spec = DatasetSpec(source="generic", path=str(path), column_map={"prompt": "turns", "id": "question_id", "kind": "category"})
    reqs = load_requests(spec)
    assert [(r.request_id, r.category, r.turns) for r in reqs] == [("p1", "writing", ("Tell me a joke.",)), ("p2", "math", ("What is 2+2?",))]
    assert reqs[0].source == "generic"


def test_generic_defaults_and_mapped_error_names(tmp_path):
    path = write_jsonl(tmp_path / "raw.jsonl", [{"text": "Hello there"}, {"text": ""}])
    spec = DatasetSpec(source="generic", path=str(path), column_map={"text": "turns"})
    with pytest.raises(DatasetError) as err:
        load_requests(spec)
    assert "raw.jsonl:2: text[0] (mapped to turns[0]): is empty" in str(err.value)
    write_jsonl(path, [{"text": "Hello there"}])
    (req,) = load_requests(spec)
    assert (req.request_id, req.category) == ("raw-1", "generic")


PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH\n\n{question}"


def test_speed_bench_local_parquet_with_placeholder_fails_with_prepare_hint(tmp_path):
    rows = [dict(r) for r in SPEED_ROWS]
    rows[2]["turns"] = [PLACEHOLDER]
    path = write_parquet(tmp_path / "speed" / "qualitative" / "test.parquet", rows)
    with pytest.raises(DatasetError) as err:
        load_requests(DatasetSpec(source="speed_bench", path=str(path), config="qualitative"))
    text = str(err.value)
    assert "test.parquet:3: turns[0]" in text
    assert "prepare_data.py" in text and "dataset.path=" in text


def test_speed_bench_prepared_folder(tmp_path):
    root = tmp_path / "speed"
    write_parquet(root / "qualitative" / "test.parquet", SPEED_ROWS)
    tp_rows = [{**r, "category": "mixed"} for r in SPEED_ROWS[:3]]
    write_parquet(root / "throughput_2k" / "test.parquet", tp_rows)
    qual = load_requests(DatasetSpec(source="speed_bench", path=str(root), config="qualitative"))
    assert len(qual) == 12 and qual[0].context_bucket == ""
    tp = load_requests(DatasetSpec(source="speed_bench", path=str(root), config="throughput_2k"))
    assert [(r.context_bucket, r.entropy_tier) for r in tp] == [("2k", "mixed")] * 3


def test_speed_bench_hub_goes_through_datasets_load_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(repo, config, split):
        calls.append((repo, config, split))
        return [{**SPEED_ROWS[0], "turns": [PLACEHOLDER]}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    with pytest.raises(DatasetError, match="prepare"):
        load_requests(DatasetSpec(source="speed_bench", path="nvidia/SPEED-Bench", config="throughput_1k"))
    assert calls == [("nvidia/SPEED-Bench", "throughput_1k", "test")]
    monkeypatch.setattr(datasets, "load_dataset", lambda repo, config, split: SPEED_ROWS[:2])
    reqs = load_requests(DatasetSpec(source="speed_bench", path="nvidia/SPEED-Bench", config="throughput_1k"))
    assert [r.context_bucket for r in reqs] == ["1k", "1k"]


def test_relative_paths_cwd_first_then_repo_datasets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path("smoke.jsonl").parent.name == "datasets"  # found in the repo's datasets/
    write_jsonl(tmp_path / "smoke.jsonl", SPEED_ROWS[:1])
    assert resolve_path("smoke.jsonl") == tmp_path / "smoke.jsonl"  # the current directory wins
    with pytest.raises(DatasetError, match="not found"):
        resolve_path("no_such_file.jsonl")


def test_default_spec_loads_shipped_suite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reqs = load_requests(DatasetSpec(n_requests=22, seed=5))
    assert len(reqs) == 22
    assert len({r.category for r in reqs}) == 11


def test_spec_accepts_config_containers():
    spec = DatasetSpec.from_dict({"source": "local", "categories": ["qa"], "column_map": {"a": "b"}, "unknown": 1})
    assert spec.categories == ("qa",) and spec.column_map == {"a": "b"}
    with pytest.raises(DatasetError):
        DatasetSpec(n_requests=-1)
    assert spec.path == "" and os.sep not in spec.path


def test_speed_bench_defaults_to_the_hub(monkeypatch):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: calls.append((args, kwargs)) or SPEED_ROWS[:1])
    (req,) = load_requests(DatasetSpec(source="speed_bench"))
    assert calls == [(("nvidia/SPEED-Bench", "qualitative"), {"split": "test"})]
    assert req.request_id == "coding-0"
