"""Schema checks: every kind of bad record is reported with file, line and field."""
import json

import pytest

from speedbench.data import DatasetError, DatasetSpec, check_file, load_requests, validate_file
from speedbench.data.testing import shared_whitespace_tokenizer
from speedbench.data.validate_cmd import main_validate

GOOD = {"question_id": "q1", "category": "qa", "turns": ["Why is the sky blue?"]}


def write_jsonl(path, records):
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def only_issue(path):
    issues = validate_file(path)
    assert len(issues) == 1, issues
    return issues[0]


def test_good_file_has_no_issues(tmp_path):
    path = write_jsonl(tmp_path / "ok.jsonl", [GOOD, {**GOOD, "question_id": "q2", "turns": ["a", "b"], "multiturn": True}])
    assert validate_file(path) == []
    check_file(path)  # does not raise


@pytest.mark.parametrize(
    "bad, field, words",
    [
        ({**GOOD, "category": "cooking"}, "category", "unknown category 'cooking'"),
        ({**GOOD, "turns": ["   "]}, "turns[0]", "is empty"),
        ({**GOOD, "turns": []}, "turns", "empty list"),
        ({**GOOD, "turns": "just a string"}, "turns", "must be a list of strings"),
        ({**GOOD, "turns": ["ok", 3]}, "turns[1]", "must be a string"),
        ({**GOOD, "question_id": 1.5}, "question_id", "string or integer"),
        ({**GOOD, "question_id": ""}, "question_id", "is empty"),
        ({**GOOD, "category": 7}, "category", "must be a string"),
        ({**GOOD, "sub_category": ["x"]}, "sub_category", "must be a string"),
        ({**GOOD, "multiturn": "yes"}, "multiturn", "true or false"),
        ({**GOOD, "multiturn": True}, "multiturn", "turns has 1 entry"),
        ({**GOOD, "entropy_tier": "medium"}, "entropy_tier", "must be one of"),
        ({**GOOD, "prompt_tokens": -3}, "prompt_tokens", "non-negative integer"),
        ({k: v for k, v in GOOD.items() if k != "turns"}, "turns", "missing required field"),
        ({k: v for k, v in GOOD.items() if k != "category"}, "category", "missing required field"),
        (["not", "an", "object"], "", "expected a JSON object"),
    ],
)
def test_each_bad_record_is_named_by_file_line_field(tmp_path, bad, field, words):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**GOOD, "question_id": "q0"}, bad])
    issue = only_issue(path)
    assert issue.path == str(path)
    assert issue.line == 2
    assert issue.field == field
    assert words in issue.message
    assert "bad.jsonl:2" in str(issue)


def test_malformed_json_line(tmp_path):
    path = write_jsonl(tmp_path / "broken.jsonl", [GOOD, '{"question_id": "q2", "category": "qa", "turns": ["x"]', {**GOOD, "question_id": "q3"}])
    issue = only_issue(path)
    assert (issue.line, issue.field) == (2, "")
    assert "malformed JSON" in issue.message


def test_duplicate_question_id_points_at_first(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [GOOD, {**GOOD, "turns": ["other"]}])
    issue = only_issue(path)
    assert (issue.line, issue.field) == (2, "question_id")
    assert "duplicate question_id 'q1'" in issue.message and "dup.jsonl:1" in issue.message


def test_integer_and_string_ids_collide(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [{**GOOD, "question_id": 7}, {**GOOD, "question_id": "7"}])
    assert "duplicate" in only_issue(path).message


def test_placeholder_prompt_says_how_to_prepare(tmp_path):
    text = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH\n\n{question}"
    path = write_jsonl(tmp_path / "hub.jsonl", [{**GOOD, "turns": [text]}])
    issue = only_issue(path)
    assert issue.field == "turns[0]"
    assert "prepare_data.py" in issue.message and "datasets/README.md" in issue.message


def test_extra_categories_are_accepted(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{**GOOD, "category": "cooking"}])
    assert validate_file(path, extra_categories=["cooking"]) == []


def test_throughput_categories_are_known(tmp_path):
    records = [{**GOOD, "question_id": f"t{i}", "category": c} for i, c in enumerate(["low_entropy", "mixed", "high_entropy"])]
    assert validate_file(write_jsonl(tmp_path / "t.jsonl", records)) == []


def test_prompt_longer_than_context(tmp_path):
    whitespace_tok = shared_whitespace_tokenizer()
    long_turn = " ".join(["the"] * 50)
    path = write_jsonl(tmp_path / "long.jsonl", [GOOD, {**GOOD, "question_id": "q2", "turns": [long_turn]}])
    assert validate_file(path, max_prompt_tokens=20) == []  # no tokenizer: no length check
    issue = only_issue_with(path, max_prompt_tokens=20, tokenizer=whitespace_tok)
    assert (issue.line, issue.field) == (2, "turns")
    assert "50 tokens" in issue.message and "limit of 20" in issue.message


def only_issue_with(path, **kwargs):
    issues = validate_file(path, **kwargs)
    assert len(issues) == 1, issues
    return issues[0]


def test_loader_reports_all_problems_before_anything_runs(tmp_path):
    path = write_jsonl(
        tmp_path / "many.jsonl",
        [GOOD, {**GOOD, "category": "nope"}, "{oops", {**GOOD, "question_id": "q4", "turns": [""]}],
    )
    with pytest.raises(DatasetError) as err:
        load_requests(DatasetSpec(source="local", path=str(path)))
    assert isinstance(err.value, ValueError)
    assert len(err.value.issues) == 4  # unknown category, malformed line, empty turn, duplicate id
    text = str(err.value)
    for line in (2, 3, 4):
        assert f"many.jsonl:{line}" in text


def test_check_file_raises(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**GOOD, "turns": []}])
    with pytest.raises(DatasetError, match="turns"):
        check_file(path)


def test_missing_file_is_an_issue(tmp_path):
    issues = validate_file(tmp_path / "nope.jsonl")
    assert len(issues) == 1 and "not found" in issues[0].message


def test_main_validate_exit_codes(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", [GOOD])
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**GOOD, "category": "x"}])
    assert main_validate([str(good)]) == 0
    assert "OK (1 records)" in capsys.readouterr().out
    assert main_validate([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "bad.jsonl:1: category: unknown category 'x'" in out
    assert main_validate([str(good), "--max-prompt-tokens", "5"]) == 2


def test_cli_subcommands_registered(tmp_path, capsys):
    import argparse

    from speedbench.data import cli

    from speedbench.cli import main as speedbench_main

    parser = argparse.ArgumentParser(prog="speedbench")
    data = parser.add_subparsers(dest="command").add_parser("data")
    cli.add_cli_args(data)
    good = write_jsonl(tmp_path / "good.jsonl", [GOOD])
    args = parser.parse_args(["data", "validate", str(good)])
    assert cli.main(args) == 0
    assert speedbench_main(["data", "validate", str(good)]) == 0  # wired into the main CLI
    assert parser.parse_args(["data", "build", "--tokenizer", "t", "--preset", "full"]).data_command == "build"
    assert cli.run(["validate", str(good)]) == 0


def test_data_validate_reports_control_strings_in_prompt_text(tmp_path, capsys):
    path = write_jsonl(tmp_path / "c.jsonl", [GOOD, {**GOOD, "question_id": "q2", "turns": ["say <|eos|> now"]}])
    assert main_validate([str(path), "--tokenizer", "builtin:tiny-target"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: turns[0]: contains '<|eos|>'" in out
    assert main_validate([str(path)]) == 1  # no tokenizer: the <|name|> shape of chat-template markers
    assert "'<|eos|>'" in capsys.readouterr().out
    assert main_validate([str(path), "--control-tokens", "keep"]) == 0
