"""Engines side by side: AL and matched speedup per engine on the tiny pair, B x D grid, one run.

    PYTHONPATH=. python benchmarks/engines.py                       # torch, vllm, hf; B=1,8; D=2,4,6
    PYTHONPATH=. python benchmarks/engines.py --engines torch,hf --batch-sizes 1 --depths 4

Every cell is a normal speedbench cell (matched baseline, warm-up, same prompts, same output
length), so the per-engine folders under the output directory are ordinary results stores; the
side-by-side table is written as engines.csv / engines.md next to them. HF runs batch size 1 only
(transformers' assisted generation): its B>1 rows say so instead of a number.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from speedbench.pipeline import runner  # noqa: E402
from speedbench.results.layout import RunFolder  # noqa: E402
from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig  # noqa: E402
from speedbench.drafters.registry import make_drafter  # noqa: E402
from speedbench.data import DatasetSpec, load_requests  # noqa: E402
from speedbench.models import local_dir  # noqa: E402

COLUMNS = ["engine", "method", "B", "D", "al", "acceptance_rate", "tpot_ms_baseline", "tpot_ms_spec", "speedup",
           "greedy_match_rate", "al_source", "status"]


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", default="torch,vllm,hf")
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--depths", default="2,4,6")
    p.add_argument("--method", default="draft_model", choices=["draft_model", "ngram"])
    p.add_argument("--target", default="random:tiny-target")
    p.add_argument("--draft", default="random:tiny-draft")
    p.add_argument("--n-requests", type=int, default=16, help="prompts (the smoke prompts, cycled)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads for torch/hf (1 avoids OpenMP oversubscription on a shared machine; 0 = torch default)")
    p.add_argument("--out", default=None, help="results folder (default results/engines/<timestamp>)")


def prompts_file(out: Path, n: int) -> Path:
    """n prompts cycled from the smoke set, with unique ids (so B=8 batches are full)."""
    base = load_requests(DatasetSpec(path="smoke.jsonl"))
    path = out / "prompts.jsonl"
    with path.open("w") as f:
        for i in range(n):
            r = base[i % len(base)]
            f.write(json.dumps({"question_id": f"{r.request_id}-{i}", "category": r.category, "turns": list(r.turns)}) + "\n")
    return path


def run_config(args, out: Path, prompts: Path, engine: str, batch: int, depth: int) -> RunConfig:
    target, draft = local_dir(args.target), local_dir(args.draft)  # the same folders for every engine
    drafter = make_drafter(args.method, depth, **({"model": draft} if args.method == "draft_model" else {}))
    options = {"max_engines": 2} if engine == "vllm" else {}
    run = RunConfig(
        target=ModelConfig(name="tiny", path=target), drafter=drafter,
        dataset=DatasetConfig(name="smoke-cycled", path=str(prompts)),
        backend=BackendConfig(name=engine, options=options, num_threads=(args.threads or None) if engine != "vllm" else None),
        sampling=SamplingConfig(),
        batch_size=batch, max_new_tokens=args.max_new_tokens, ignore_eos=True, warmup_batches=1,
        results_dir=str(out), run_id=engine, resume=True, per_category=False,
    )
    return run  # the runner's validation pass checks it before anything loads


def main(args: argparse.Namespace) -> int:
    out = Path(args.out or f"results/engines/{dt.datetime.now():%Y%m%d-%H%M%S}")
    out.mkdir(parents=True, exist_ok=True)
    prompts = prompts_file(out, args.n_requests)
    rows = []
    for engine in args.engines.split(","):
        for depth in map(int, args.depths.split(",")):  # D outer: a vLLM engine serves both batch sizes
            for batch in map(int, args.batch_sizes.split(",")):
                row = {"engine": engine, "method": args.method, "B": batch, "D": depth}
                if engine == "hf" and batch > 1:
                    rows.append(row | {"status": "n/a: HF assisted generation is batch-1"})
                    continue
                cells = runner.run_cells(run_config(args, out, prompts, engine, batch, depth), progress=False)
                cell = cells[0] if cells else None
                if cell is None:  # resumed: read the finished cell back
                    table = pd.read_parquet(RunFolder(out / engine).table_path("parquet"))
                    match = table[(table.batch_size == batch) & (table.num_speculative_tokens == depth)]
                    cell = match.iloc[-1]
                rows.append(row | {c: getattr(cell, c) for c in COLUMNS[4:]})
                print(_fmt(pd.DataFrame([rows[-1]])).splitlines()[-1], flush=True)
        backend = runner._BACKENDS.copy()
        for key, b in backend.items():  # free the engine's memory before the next one loads
            if b.name == engine:
                b.close()
                runner._BACKENDS.pop(key)
    table = pd.DataFrame(rows, columns=COLUMNS)
    table.to_csv(out / "engines.csv", index=False)
    text = _fmt(table)
    (out / "engines.md").write_text("```\n" + text + "\n```\n")
    print(f"\n{text}\n\nresults: {out}")
    return 0


def _fmt(table: pd.DataFrame) -> str:
    return table.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cli_args(parser)
    raise SystemExit(main(parser.parse_args()))
