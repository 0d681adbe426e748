"""Deterministic builder of the throughput splits (prompts of an exact token length).

For each size ("1k" = 1,000 tokens as in SPEED-Bench, "2k", "8k", "16k", "32k") and each
entropy tier (low, mixed, high) it writes ``n_per_tier`` prompts to
``<out_dir>/throughput_<size>.jsonl`` in SPEED-Bench record format:

    category      "low_entropy" | "mixed" | "high_entropy"
    sub_category  the task: code_continue, sort_items, needle, exam, creative_writing, dialogue
    context_bucket, entropy_tier, prompt_tokens, length_mode, tokenizer

The length that is exact is ``prompt_tokens`` under ``length_mode`` (see ``fit.py``):
``raw`` = tokens of the prompt text encoded without special tokens; ``chat`` = tokens after
the tokenizer's chat template with the generation prompt. Same tokenizer + seed +
repository + Python version -> byte-identical files.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from . import tiers
from .fit import LENGTH_MODES, NotEnoughFiller, fit_exact, length_counter
from .spec import ENTROPY_TIERS

ALL_SIZES = ("1k", "2k", "8k", "16k", "32k")
PRESETS: dict[str, dict[str, Any]] = {
    "mini": {"sizes": ("1k", "2k"), "n_per_tier": 2},  # CI / smoke runs
    "full": {"sizes": ALL_SIZES, "n_per_tier": 512},  # SPEED-Bench scale: 1,536 per size
}
MAX_SRC_IDS = 12


def size_tokens(size: str) -> int:
    """``"8k"`` -> 8000 (SPEED-Bench counts 1k as 1,000); ``"1500"`` -> 1500."""
    match = re.fullmatch(r"(\d+)k", size.strip().lower())
    if match:
        return int(match.group(1)) * 1000
    if size.strip().isdigit():
        return int(size)
    raise ValueError(f"bad size {size!r}: use e.g. '1k', '8k' or a token count")


def tokenizer_label(tokenizer: Any) -> str:
    """A short tokenizer name for the records (never a machine path)."""
    name = str(getattr(tokenizer, "name_or_path", "") or "")
    if "/" in name and Path(name).exists():
        name = Path(name).name
    return name or type(tokenizer).__name__


def build_prompt(tokenizer: Any, size: str, tier: str, index: int, seed: int, length_mode: str = "raw") -> dict[str, Any]:
    """One throughput record (deterministic in its arguments)."""
    target = size_tokens(size)
    measure = length_counter(tokenizer, length_mode)
    task = tiers.TASKS[tier][index % len(tiers.TASKS[tier])]
    margin = 1.15
    for _ in range(4):  # grow the filler if the first gathering was too short
        rng = random.Random(f"{seed}:{size}:{tier}:{index}")
        ctx = tiers.TaskContext(rng=rng, tokenizer=tokenizer, need=int(target * margin) + 64, keep=target)
        parts = task(ctx)
        try:
            text = fit_exact(parts, target, tokenizer, measure)
            break
        except NotEnoughFiller:
            margin *= 1.5
    else:
        raise NotEnoughFiller(f"not enough filler for {size}/{tier}/{index}")
    if parts.must_contain and parts.must_contain not in text:
        raise ValueError(f"{size}/{tier}/{index}: the needle was cut off")
    sources = parts.src_ids[:MAX_SRC_IDS] + ([f"+{len(parts.src_ids) - MAX_SRC_IDS} more"] if len(parts.src_ids) > MAX_SRC_IDS else [])
    return {
        "question_id": f"throughput_{size}-{tier}-{index:04d}",
        "category": tiers.TIER_CATEGORY[tier],
        "sub_category": task.__name__,
        "turns": [text],
        "source": "speedbench-build",
        "src_id": ";".join(sources),
        "difficulty": "",
        "multiturn": False,
        "context_bucket": size,
        "entropy_tier": tier,
        "prompt_tokens": target,
        "length_mode": length_mode,
        "tokenizer": tokenizer_label(tokenizer),
    }


def build_throughput(
    tokenizer: Any,
    sizes: Sequence[str] = ALL_SIZES,
    n_per_tier: int = 512,
    seed: int = 0,
    out_dir: str | Path = "datasets/throughput",
    length_mode: str = "raw",
) -> list[Path]:
    """Write ``throughput_<size>.jsonl`` for every size; returns the written paths.

    ``tokenizer``: any transformers tokenizer (or a raw ``tokenizers.Tokenizer``).
    """
    if length_mode not in LENGTH_MODES:
        raise ValueError(f"length_mode must be one of {LENGTH_MODES}")
    n_per_tier = prompts_per_tier(n_per_tier)  # before any split is opened (opening one truncates it)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for size in sizes:
        path = out / f"throughput_{size}.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for tier in ENTROPY_TIERS:
                for index in range(n_per_tier):
                    record = build_prompt(tokenizer, size, tier, index, seed, length_mode)
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        written.append(path)
    manifest = {
        "sizes": list(sizes),
        "n_per_tier": n_per_tier,
        "seed": seed,
        "length_mode": length_mode,
        "tokenizer": tokenizer_label(tokenizer),
        "python": ".".join(map(str, sys.version_info[:3])),
        "files": [p.name for p in written],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return written


_AT_LEAST_ONE = "a whole number of at least 1"


def prompts_per_tier(value: Any) -> int:
    """``n_per_tier``: a whole number of at least 1 (0 would truncate a split to nothing), else ValueError."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < 1 or str(number) != str(value).strip():
        raise ValueError(f"n_per_tier must be {_AT_LEAST_ONE}, not {value!r}")
    return number


def _n_per_tier_arg(text: str) -> int:
    try:
        return prompts_per_tier(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_AT_LEAST_ONE}, not {text!r}") from None


def add_build_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True, help="tokenizer: builtin:NAME, random:PRESET, a folder or a hub id")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="mini", help="sizes and prompts per tier (default: mini)")
    parser.add_argument("--sizes", nargs="+", default=None, help="override the preset's sizes, e.g. 1k 8k")
    parser.add_argument("--n-per-tier", type=_n_per_tier_arg, default=None, help="override the preset's prompts per tier")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default="datasets/throughput")
    parser.add_argument("--length-mode", choices=LENGTH_MODES, default="raw", help="which length is exact (see docs)")


def run_build(args: argparse.Namespace) -> int:
    from .validate_cmd import load_tokenizer

    from ..console import UsageError

    preset = PRESETS[args.preset]
    try:
        paths = build_throughput(
            load_tokenizer(args.tokenizer),
            sizes=tuple(args.sizes or preset["sizes"]),
            n_per_tier=args.n_per_tier if args.n_per_tier is not None else preset["n_per_tier"],
            seed=args.seed,
            out_dir=args.out_dir,
            length_mode=args.length_mode,
        )
    except ValueError as exc:  # a size or a tokenizer the builder cannot fit (LengthFitError, NotEnoughFiller, ...)
        raise UsageError(f"data build: {exc}") from None
    for path in paths:
        print(f"wrote {path}")
    return 0


def main_build(argv: Sequence[str] | None = None) -> int:
    """``speedbench data build --tokenizer T [--preset mini|full] ...``"""
    parser = argparse.ArgumentParser(prog="speedbench data build", description="Build exact-length throughput splits.")
    add_build_args(parser)
    return run_build(parser.parse_args(argv))

