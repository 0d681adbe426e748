"""A results folder from the synthetic backend: the runner over a small D x B x mechanism grid."""
from __future__ import annotations

import json
from pathlib import Path

from speedbench.pipeline import runner
from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter

CATEGORIES = {
    "coding": "def add(a, b):\n    return a + b  # now write the tests",
    "writing": "Write a short poem about the sea at night.",
    "math": "What is 17 * 23? Show the steps.",
}
PER_CATEGORY = 4
OPTIONS = {
    "alpha_by_category": {"coding": 0.85, "math": 0.7, "writing": 0.5},
    "alpha_by_method": {"ngram": 0.6},
    "verify_a_ms": 2.0,
    "verify_b_ms": 0.1,
    "draft_ms_by_method": {"ngram": 0.01, "draft_model": 0.4},
    "seed": 0,
}
MECHANISMS = (("tiny_draft", "draft_model", "random:tiny-draft"), ("ngram", "ngram", None))
DEPTHS = (1, 2, 4)
BATCHES = (1, 4)


def write_prompts(path: Path) -> Path:
    with path.open("w") as f:
        for cat, text in CATEGORIES.items():
            for i in range(PER_CATEGORY):
                f.write(json.dumps({"question_id": f"{cat}-{i}", "category": cat, "turns": [text * (i + 1)]}) + "\n")
    return path


def make_results(root: Path, run_id: str = "syn", max_new_tokens: int = 32, mechanisms=MECHANISMS,
                 depths=DEPTHS, batches=BATCHES, options=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    prompts = write_prompts(root / "prompts.jsonl")
    for name, method, model in mechanisms:
        for d in depths:
            for b in batches:
                run = RunConfig(
                    target=ModelConfig(name="tiny", path="random:tiny-target"),
                    drafter=make_drafter(method, d, name=name, **({"model": model} if model else {})),
                    dataset=DatasetConfig(name="prompts", path=str(prompts)),
                    backend=BackendConfig(name="synthetic", options=dict(options or OPTIONS)),
                    sampling=SamplingConfig(), batch_size=b, max_new_tokens=max_new_tokens,
                    results_dir=str(root), run_id=run_id, resume=False, warmup_batches=0,
                )
                runner.run_cells(run, progress=False)
    return root / run_id


def raw_cells(run_dir: Path, derived: bool = False) -> list[dict]:
    """The measured cell rows straight from the per-cell JSON files (independent of the report's loader);
    ``derived=True``: the derived overall rows (category=all) instead."""
    rows = [json.loads(p.read_text()) for p in sorted((run_dir / "cells").glob("*.json"))]
    return [r for r in rows if bool(r.get("derived")) == derived]


_CACHE: dict[str, Path] = {}


def shared_results(tmp_path_factory) -> Path:
    """One synthetic run per test session (read-only: copy it before changing anything)."""
    if "run" not in _CACHE:
        _CACHE["run"] = make_results(tmp_path_factory.mktemp("synthetic"))
    return _CACHE["run"]
