"""The throughput builder: exact token lengths for two tokenizers, tiers, determinism."""
import json

import pytest

from speedbench.data import DatasetSpec, load_requests, validate_file
from speedbench.data.build import PRESETS, build_prompt, build_throughput, main_build, size_tokens
from speedbench.data.fit import LengthFitError, PromptParts, fit_exact, length_counter
from speedbench.data.testing import CHAT_TEMPLATE, shared_bpe_tokenizer, shared_whitespace_tokenizer
from speedbench.data.tiers import TASKS
from speedbench.data.tokens import chat_ids, count_tokens

TOKENIZERS = {"bpe": shared_bpe_tokenizer, "whitespace": shared_whitespace_tokenizer}


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def built(request, tmp_path_factory):
    tokenizer = TOKENIZERS[request.param]()
    out = tmp_path_factory.mktemp(f"tp_{request.param}")
    paths = build_throughput(tokenizer, sizes=("1k", "2k"), n_per_tier=2, seed=0, out_dir=out)
    return tokenizer, out, paths


def test_exact_raw_lengths(built):
    tokenizer, _, paths = built
    assert [p.name for p in paths] == ["throughput_1k.jsonl", "throughput_2k.jsonl"]
    for path, target in zip(paths, (1000, 2000)):
        records = read(path)
        assert len(records) == 6
        for record in records:
            assert record["prompt_tokens"] == target
            assert count_tokens(tokenizer, record["turns"][0]) == target, record["question_id"]


def test_records_cover_tiers_and_tasks(built):
    _, _, paths = built
    records = read(paths[0])
    assert [(r["category"], r["entropy_tier"], r["sub_category"]) for r in records] == [
        ("low_entropy", "low", "code_continue"), ("low_entropy", "low", "sort_items"),
        ("mixed", "mixed", "needle"), ("mixed", "mixed", "exam"),
        ("high_entropy", "high", "creative_writing"), ("high_entropy", "high", "dialogue"),
    ]
    assert {r["context_bucket"] for r in records} == {"1k"}
    assert all(r["length_mode"] == "raw" and not r["multiturn"] for r in records)


def test_instruction_is_kept_whole_at_the_end(built):
    _, _, paths = built
    for record in read(paths[1]):
        text = record["turns"][0]
        if record["sub_category"] == "exam":
            assert text.rstrip().split("\n")[-1].startswith("5. ")
        elif record["sub_category"] == "needle":
            assert text.endswith("then quote the sentence that contains it.")
            assert "Note for staff: the access code for the" in text
        else:
            assert text.endswith((".", "code.", "else."))


def test_build_is_deterministic(built, tmp_path):
    tokenizer, _, paths = built
    again = build_throughput(tokenizer, sizes=("1k", "2k"), n_per_tier=2, seed=0, out_dir=tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]
    other_seed = build_prompt(tokenizer, "1k", "high", 0, seed=1)
    assert other_seed["turns"] != read(paths[0])[4]["turns"]


def test_output_validates_and_loads(built):
    _, out, paths = built
    for path in paths:
        assert validate_file(path) == []
    reqs = load_requests(DatasetSpec(path=str(out), config="throughput_2k", n_requests=3))
    assert [(r.category, r.context_bucket, r.entropy_tier) for r in reqs] == [
        ("high_entropy", "2k", "high"), ("low_entropy", "2k", "low"), ("mixed", "2k", "mixed")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sizes"] == ["1k", "2k"] and manifest["n_per_tier"] == 2


def test_exact_after_chat_template(tmp_path):
    tokenizer = shared_bpe_tokenizer(CHAT_TEMPLATE)
    (path,) = build_throughput(tokenizer, sizes=("1k",), n_per_tier=1, out_dir=tmp_path, length_mode="chat")
    for record in read(path):
        ids = chat_ids(tokenizer, [{"role": "user", "content": record["turns"][0]}])
        assert len(ids) == 1000 and record["length_mode"] == "chat"


def test_chat_mode_needs_a_template():
    with pytest.raises(LengthFitError, match="chat_template"):
        length_counter(shared_whitespace_tokenizer(), "chat")


def test_fit_exact_small_targets_and_errors():
    tokenizer = shared_bpe_tokenizer()
    measure = length_counter(tokenizer)
    parts = PromptParts("Intro:\n", "The river bends slowly. " * 200, "Question: what bends?")
    for target in (40, 41, 57, 300):
        text = fit_exact(parts, target, tokenizer, measure)
        assert measure(text) == target and text.endswith("Question: what bends?") and text.startswith("Intro:\n")
    with pytest.raises(LengthFitError, match="more than the target"):
        fit_exact(parts, 3, tokenizer, measure)
    with pytest.raises(LengthFitError, match="filler"):
        fit_exact(PromptParts("", "short body", "end"), 500, tokenizer, measure)


def test_sizes_and_presets():
    assert [size_tokens(s) for s in ("1k", "2k", "8k", "16k", "32k", "1500")] == [1000, 2000, 8000, 16000, 32000, 1500]
    with pytest.raises(ValueError):
        size_tokens("big")
    assert PRESETS["mini"] == {"sizes": ("1k", "2k"), "n_per_tier": 2}
    assert PRESETS["full"]["n_per_tier"] == 512 and len(PRESETS["full"]["sizes"]) == 5
    assert {tier: [t.__name__ for t in tasks] for tier, tasks in TASKS.items()} == {
        "low": ["code_continue", "sort_items"], "mixed": ["needle", "exam"], "high": ["creative_writing", "dialogue"]}


def test_cli_build_with_a_saved_tokenizer(tmp_path, capsys):
    tokenizer = shared_whitespace_tokenizer()
    tokenizer.save_pretrained(tmp_path / "tok")
    out = tmp_path / "out"
    assert main_build(["--tokenizer", str(tmp_path / "tok"), "--sizes", "1k", "--n-per-tier", "1", "--out-dir", str(out)]) == 0
    assert "throughput_1k.jsonl" in capsys.readouterr().out
    records = read(out / "throughput_1k.jsonl")
    assert len(records) == 3
    assert all(count_tokens(tokenizer, r["turns"][0]) == 1000 for r in records)
    assert all("/" not in r["tokenizer"] for r in records)  # no machine paths in records


def test_raw_tokenizers_object_is_accepted():
    raw = shared_bpe_tokenizer().backend_tokenizer  # a tokenizers.Tokenizer, no transformers wrapper
    record = build_prompt(raw, "1k", "mixed", 1, seed=0)
    assert len(raw.encode(record["turns"][0], add_special_tokens=False).ids) == 1000


class SlowLike:
    """A tokenizer without offset mappings (like transformers' slow tokenizers)."""

    chat_template = None

    def __init__(self, inner):
        self.inner = inner
        self.name_or_path = "slow-like"

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        if return_offsets_mapping:
            raise NotImplementedError("no offsets")
        return self.inner(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, **kwargs):
        return self.inner.decode(ids, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        raise AssertionError("not used")


def test_tokenizer_without_offsets_falls_back_to_decoding():
    tok = SlowLike(shared_bpe_tokenizer())
    record = build_prompt(tok, "1k", "high", 0, seed=0)
    assert count_tokens(tok, record["turns"][0]) == 1000


@pytest.mark.parametrize("name", ["random:tiny-target", "builtin:tiny-target"])
def test_cli_build_with_a_named_tokenizer_keeps_the_needle(name, tmp_path, capsys):
    """Byte-level tokens make paragraphs long: the needle must still land inside what the cut keeps."""
    from speedbench import models

    out = tmp_path / "out"
    assert main_build(["--tokenizer", name, "--sizes", "1k", "--n-per-tier", "2", "--out-dir", str(out)]) == 0
    records = read(out / "throughput_1k.jsonl")
    needles = [r for r in records if r["sub_category"] == "needle"]
    assert needles and all(count_tokens(models.load_tokenizer(name), r["turns"][0]) == 1000 for r in records)


@pytest.mark.parametrize("count", ["0", "-1"])
def test_cli_build_refuses_no_prompts_per_tier_and_keeps_the_split(count, tmp_path, capsys):
    """``--n-per-tier 0`` (or negative) would truncate an existing split to nothing: refused, one line, exit 2."""
    from speedbench.cli import main

    out = tmp_path / "out"
    out.mkdir()
    split = out / "throughput_1k.jsonl"
    split.write_text('{"kept": true}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "build", "--tokenizer", "random:tiny-target", "--sizes", "1k", "--n-per-tier", count,
              "--out-dir", str(out)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "--n-per-tier" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "wrote" not in captured.out
    assert split.read_text(encoding="utf-8") == '{"kept": true}\n'
    assert not (out / "manifest.json").exists()


def test_library_build_refuses_no_prompts_per_tier(tmp_path):
    split = tmp_path / "throughput_1k.jsonl"
    split.write_text("kept\n", encoding="utf-8")
    with pytest.raises(ValueError, match="n_per_tier"):
        build_throughput(shared_whitespace_tokenizer(), sizes=("1k",), n_per_tier=0, out_dir=tmp_path)
    assert split.read_text(encoding="utf-8") == "kept\n"
