"""Where the shipped configs, prompts and models come from, and what precision they say they are."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from speedbench import paths
from speedbench.fixtures import MODELS_DIR

SHIPPED = ("tiny-target", "tiny-draft-small", "tiny-draft-large", "tiny-eagle3")


def test_shipped_folders_are_found_and_are_ours():
    import datasets  # the Hugging Face library, installed next to speedbench

    assert (paths.conf_dir() / "config.yaml").is_file()
    assert (paths.gate_conf_dir() / "ci.yaml").is_file()
    assert (paths.datasets_dir() / "smoke.jsonl").is_file()
    assert paths.datasets_dir().resolve() != Path(datasets.__file__).resolve().parent


def test_dataset_paths_resolve_against_the_shipped_prompts(tmp_path, monkeypatch):
    from speedbench.data import resolve_path

    monkeypatch.chdir(tmp_path)
    for name in ("smoke.jsonl", "datasets/smoke.jsonl", "throughput/throughput_1k.jsonl"):
        assert resolve_path(name).is_relative_to(paths.datasets_dir()), name
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "smoke.jsonl").write_text("{}\n")
    assert resolve_path("datasets/smoke.jsonl") == tmp_path / "datasets" / "smoke.jsonl"  # the user's own file wins


@pytest.mark.parametrize("name", SHIPPED)
def test_config_dtype_is_the_stored_dtype(name):
    from safetensors import safe_open

    cfg = json.loads((MODELS_DIR / name / "config.json").read_text())
    with safe_open(str(MODELS_DIR / name / "model.safetensors"), "pt") as f:
        stored = {str(f.get_tensor(k).dtype).removeprefix("torch.") for k in f.keys()}
    assert stored == {cfg["dtype"]}


def test_the_reference_engine_still_computes_in_the_configured_dtype():
    import torch

    from speedbench import models
    from speedbench.config import ModelConfig

    assert ModelConfig.dtype == "float32"
    assert {p.dtype for p in models.load_model("builtin:tiny-target").parameters()} == {torch.float32}
    assert {p.dtype for p in models.load_model("builtin:tiny-target", "float16").parameters()} == {torch.float16}


REPO = Path(__file__).resolve().parents[2]


def test_every_guidelines_citation_points_at_the_shipped_theory():
    import re

    theory = (REPO / "docs" / "guidelines.md").read_text(encoding="utf-8")
    for needle in ("(T_verif(B) + T_other) · AL / ( T_verif(B(1 + D)) + T_draft(B, D) + T_other' )", "AL / (1 + ρ·D)", "### 3.3 Round accounting",
                   "160 / 65 = 2.46×", *(f"### G{i}:" for i in range(1, 6))):
        assert needle in theory, needle
    sections = set(re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", theory, re.M))
    files = [*(REPO / "speedbench").rglob("*.py"), *(REPO / "docs").glob("*.md"), REPO / "README.md", *(REPO / "tests").rglob("*.py")]
    cited = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"(\S*)guidelines\.md(?: sections? ([\d.]+))?", text):
            if path.name == "test_packaging.py":
                continue
            assert m.group(1).endswith(("docs/", "(docs/", "`docs/")) or path.parent.name == "docs", (path, m.group(0))
            if m.group(2):
                assert m.group(2).rstrip(".") in sections, (path, m.group(0))
            cited += 1
    assert cited >= 6


def test_round_cites_the_section_it_follows(capsys):
    from speedbench.cli import main

    assert main(["round"]) == 0
    assert "docs/guidelines.md section 3.3" in capsys.readouterr().out
