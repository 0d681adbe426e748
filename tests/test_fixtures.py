"""Tests for the embedded fixture models (speedbench.fixtures)."""
from __future__ import annotations

import json

import pytest

from speedbench.fixtures import DEFAULT_DRAFTER, DRAFTERS, EAGLE3_HEAD, MODELS_DIR, PARD_DRAFT, TARGET, model_path, verify_manifest
from speedbench.fixtures.corpus import render_chat
from speedbench.fixtures.manifest import read_manifest
from speedbench.fixtures.prose import ProseGenerator

ALL_MODELS = (TARGET, *DRAFTERS)
MAX_TOTAL_BYTES = 25 * 1024 * 1024

# Recorded from the shipped weights (float32 compute on CPU, greedy, B=1, D=4, 64 new
# tokens). Exact integers: a retrain or a different CPU kernel may legitimately change them.
AL_PROMPT = 'class Queue:\n    """A first-in, first-out queue."""\n\n    def __init__(self, maxsize=0):\n        self.'
AL_EXPECTED_ACCEPTED = (3, 0, 1, 4, 1, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4)
AL_EXPECTED_CONTINUATION_LEN = 64


@pytest.fixture(scope="module")
def torch():
    import torch

    torch.set_num_threads(2)
    return torch


@pytest.fixture(scope="module")
def models(torch):
    from transformers import AutoModelForCausalLM

    return {
        name: AutoModelForCausalLM.from_pretrained(str(model_path(name)), dtype=torch.float32).eval()
        for name in ALL_MODELS
    }


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_path(TARGET)))


def test_manifest_hashes_match():
    assert verify_manifest(MODELS_DIR) == []


def test_verify_manifest_reports_changed_file(tmp_path):
    import shutil

    shutil.copytree(MODELS_DIR / TARGET, tmp_path / TARGET)
    shutil.copy2(MODELS_DIR / "MANIFEST.json", tmp_path / "MANIFEST.json")
    (tmp_path / TARGET / "generation_config.json").write_text("{}\n")
    bad = verify_manifest(tmp_path)
    assert f"{TARGET}/generation_config.json" in bad
    assert f"{DEFAULT_DRAFTER}/model.safetensors" in bad  # listed but missing


def test_total_size_within_budget():
    manifest = read_manifest(MODELS_DIR)
    assert manifest["total_size"] <= MAX_TOTAL_BYTES
    assert sum(p.stat().st_size for p in MODELS_DIR.rglob("*") if p.is_file()) <= MAX_TOTAL_BYTES


def test_model_path_unknown_name():
    with pytest.raises(FileNotFoundError):
        model_path("no-such-model")


@pytest.mark.parametrize("name", ALL_MODELS)
def test_model_dirs_are_self_contained(name):
    d = model_path(name)
    for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
              "tokenizer_config.json"):
        assert (d / f).is_file(), f
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["head_dim"] == 64
    assert cfg["num_attention_heads"] * 64 == cfg["hidden_size"]
    assert cfg["tie_word_embeddings"] is True
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    assert tok_cfg["bos_token"] == "<|bos|>" and tok_cfg["eos_token"] == "<|eos|>"
    assert tok_cfg["pad_token"] == "<|pad|>"


def test_target_architecture(models):
    cfg = models[TARGET].config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 256, 4, 2)
    assert cfg.max_position_embeddings >= 2048
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    assert n["tiny-draft-small"] < n["tiny-draft-large"] < n[TARGET]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_loads_with_auto_classes(name, models, tokenizer, torch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_path(name)))
    assert tok.get_vocab() == tokenizer.get_vocab()
    model = models[name]
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tok)
    ids = tok("def add(a, b):\n    return", return_tensors="pt").input_ids
    assert ids[0, 0].item() == tok.bos_token_id
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()


def test_chat_template_matches_training_format(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Tell me a story."}]
    for gen in (False, True):
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        assert text == render_chat(msgs, add_generation_prompt=gen)
    assert text.endswith("<|assistant|>\n")
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids.count(tokenizer.bos_token_id) == 1


def test_greedy_generation_is_deterministic(models, tokenizer, torch):
    ids = tokenizer("def fibonacci(n):\n", return_tensors="pt").input_ids
    outs = []
    for _ in range(2):
        with torch.no_grad():
            outs.append(models[TARGET].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24,
                                                do_sample=False).tolist())
    assert outs[0] == outs[1]
    assert len(outs[0][0]) > ids.shape[1]


def test_simulated_al_of_default_pair_is_recorded_value(models, tokenizer):
    from speedbench.fixtures.quality import simulate_greedy_al

    ids = tokenizer(AL_PROMPT).input_ids
    r = simulate_greedy_al(models[TARGET], models[DEFAULT_DRAFTER], ids, D=4, max_new_tokens=64)
    assert r.accepted == AL_EXPECTED_ACCEPTED
    assert len(r.continuation) == AL_EXPECTED_CONTINUATION_LEN
    assert all(0 <= a <= 4 for a in r.accepted)
    assert r.al == sum(a + 1 for a in r.accepted) / len(r.accepted)


def test_simulate_greedy_al_self_draft_accepts_everything(models, tokenizer):
    from speedbench.fixtures.quality import simulate_greedy_al

    ids = tokenizer("import os\n").input_ids
    r = simulate_greedy_al(models[TARGET], models[TARGET], ids, D=4, max_new_tokens=20)
    assert all(a == 4 for a in r.accepted[:-1])  # a drafter identical to the target is always right
    assert r.al >= 4.0


def test_recorded_quality_bars():
    prov = read_manifest(MODELS_DIR)["provenance"]
    target = prov["models"][TARGET]
    assert target["val_ppl"] < prov["unigram_val_ppl"] / 3
    al = prov["al_greedy_D4"]
    for name in DRAFTERS:
        assert al[name]["code"] >= 2.5
        assert al[name]["code"] > al[name]["writing"]
    for cat in ("code", "writing"):
        assert al["tiny-draft-large"][cat] > al["tiny-draft-small"][cat]
    assert prov["corpus_sha256"] == json.loads((MODELS_DIR / "corpus.json").read_text())["sha256"]


def test_target_perplexity_on_fresh_text_below_unigram(models, tokenizer, torch):
    """Recompute on text the corpus never contained, instead of trusting the manifest alone."""
    import math

    text = ProseGenerator(seed=99).story() + "\n\n" + (
        "def area(width, height):\n    \"\"\"Return the area of a rectangle.\"\"\"\n    return width * height\n"
    )
    ids = torch.tensor([tokenizer(text).input_ids[:256]])
    with torch.no_grad():
        loss = models[TARGET](input_ids=ids, labels=ids).loss.item()
    assert math.exp(loss) < read_manifest(MODELS_DIR)["provenance"]["unigram_val_ppl"] / 3


def test_prose_generator_is_seeded():
    a, b, c = ProseGenerator(7), ProseGenerator(7), ProseGenerator(8)
    docs_a = [a.document() for _ in range(5)]
    assert docs_a == [b.document() for _ in range(5)]
    assert docs_a != [c.document() for _ in range(5)]


@pytest.mark.slow
def test_quick_training_end_to_end(tmp_path):
    from speedbench.fixtures.train import train_all

    prov = train_all(tmp_path, quick=True, log=lambda *_: None)
    assert verify_manifest(tmp_path) == []
    for name in (*ALL_MODELS, EAGLE3_HEAD, PARD_DRAFT):
        assert (tmp_path / name / "model.safetensors").is_file()
    assert prov["quick"] is True and prov["models"][TARGET]["steps"] == 4
    assert prov["models"][EAGLE3_HEAD]["steps"] == 2 and len(prov["models"][EAGLE3_HEAD]["val_kl_per_ttt_step"]) == 3
    assert prov["models"][PARD_DRAFT]["steps"] == 2 and len(prov["models"][PARD_DRAFT]["val_top1_match_per_depth"]) == 8
    assert json.loads((tmp_path / PARD_DRAFT / "config.json").read_text())["pard_token"] == 2
    assert set(prov["al_greedy_D4"]) == set(DRAFTERS)


@pytest.mark.slow
def test_quick_training_resumes_bitwise_identically(tmp_path):
    """An interrupted build resumes from its checkpoints and ends with the same files."""
    from speedbench.fixtures.train import train_all

    class Stop(Exception):
        pass

    def stop_at(prefix):
        def log(msg):
            if msg.startswith(prefix):
                raise Stop(msg)
        return log

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train_all(whole, quick=True, run_quality=False, log=lambda *_: None)
    for prefix in ("target step 3/", "drafters step 3/", f"{EAGLE3_HEAD} step 2/", f"{PARD_DRAFT} step 2/"):
        with pytest.raises(Stop):
            train_all(resumed, quick=True, run_quality=False, log=stop_at(prefix))
    train_all(resumed, quick=True, run_quality=False, log=lambda *_: None)
    assert not (resumed / "_checkpoints").exists()
    assert read_manifest(resumed)["files"] == read_manifest(whole)["files"]


def test_eagle3_head_is_shipped_in_vllm_layout():
    from safetensors.torch import load_file

    from speedbench.engine.eagle3_head import ARCHITECTURE, load_head

    d = model_path(EAGLE3_HEAD)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == [ARCHITECTURE]
    target = json.loads((model_path(TARGET) / "config.json").read_text())
    assert cfg["target_hidden_size"] == target["hidden_size"] and cfg["vocab_size"] == target["vocab_size"]
    assert all(0 < i < target["num_hidden_layers"] for i in cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    keys = set(load_file(str(d / "model.safetensors")))
    assert "fc.weight" in keys and not any(k.startswith(("embed_tokens", "lm_head")) for k in keys)  # shared
    head = load_head(d)
    info = read_manifest(MODELS_DIR)["provenance"]["models"][EAGLE3_HEAD]
    assert info["params"] == sum(p.numel() for p in head.parameters())
    kl = info["val_kl_per_ttt_step"]
    assert kl[0] < 1.0 and kl == sorted(kl)  # further draft steps are harder, as they should be


def test_cli_verifies_the_shipped_files(capsys):
    from speedbench.cli import main

    assert main(["fixtures", "verify"]) == 0
    assert "match the shipped MANIFEST.json" in capsys.readouterr().out


def test_cli_compares_a_rebuild_with_the_shipped_files(tmp_path, capsys):
    import shutil

    from speedbench.cli import main

    rebuild = tmp_path / "rebuild"
    shutil.copytree(MODELS_DIR, rebuild)
    assert main(["fixtures", "verify", "--dir", str(rebuild)]) == 0
    (rebuild / EAGLE3_HEAD / "config.json").write_text("{}\n")
    assert main(["fixtures", "verify", "--dir", str(rebuild)]) == 1
    assert f"mismatch: {EAGLE3_HEAD}/config.json" in capsys.readouterr().out


@pytest.mark.engine
def test_vllm_loads_the_shipped_pair_as_target_and_draft_model():
    """vLLM (CPU) serves the shipped target with the shipped drafter as draft_model, losslessly
    (the session's one vLLM run of the shipped pair, tests/engine_support.py)."""
    from .engine_support import shipped_pair_on_vllm

    cells = shipped_pair_on_vllm()
    cells = cells[cells.drafter == "tiny_draft_small"]
    assert sorted(cells.category) == ["all", "coding", "writing"] and set(cells.method) == {"draft_model"}
    assert (cells.status == "ok").all() and set(cells.backend) == {"vllm"}
    assert (cells.greedy_match_rate == 1.0).all()
    assert (cells.al > 1.0).all()  # a trained drafter is accepted sometimes
