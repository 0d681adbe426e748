"""Reference-engine benchmark (issue: foundation). Numbers go into release notes, not tests.

Measures, in one process on the same model and prompts:
  1. plain greedy decode tokens/s: the reference engine (lean Llama path and HF-forward path)
     versus Hugging Face ``generate`` -- medians over repeats, warm-up excluded;
  2. harness overhead: loop time outside draft/verify/accept as a % of step time;
  3. |measured speedup / predicted speedup - 1| per cell of a small sweep;
  4. peak RSS and wall time of the default ``speedbench run`` (a child process).

    python benchmarks/engine_speed.py [--target builtin:tiny-target] [--new-tokens 128] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from speedbench import models
from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter
from speedbench.data import DatasetSpec, load_requests
from speedbench.data.chat import render_conversation
from speedbench.drafters import build_drafter
from speedbench.engine.build import LMBuilder
from speedbench.engine.drafting import DraftContext
from speedbench.engine.clock import Clock
from speedbench.engine.decode import generate
from speedbench.engine.sampling import SamplingParams
from speedbench.pipeline.runner import run_cells


def default_target() -> str:
    return "builtin:tiny-target" if (models.FIXTURES_DIR / "tiny-target").is_dir() else "random:tiny-target"


def decode_speed(target: str, prompts: list[list[int]], new_tokens: int, repeats: int) -> dict:
    model = models.load_model(target)
    clock = Clock("cpu")
    ctx = DraftContext(model, None, torch.device("cpu"), None)
    none = build_drafter("none", ctx, {})
    engines = {
        "hf_generate": None,
        "reference_lean": lambda: LMBuilder("lean")(model),
        "reference_hf_forward": lambda: LMBuilder("hf")(model),
    }
    outputs, times = {}, {name: [] for name in engines}
    with torch.inference_mode():
        for rep in range(repeats + 1):  # repeat 0 is the warm-up
            for name, make in engines.items():
                t0 = time.perf_counter()
                outs = []
                for p in prompts:
                    if make is None:
                        ids = torch.tensor([p])
                        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
                        outs.append(out[0, len(p):].tolist())
                    else:
                        res = generate(make(), none, [p], 0, new_tokens, SamplingParams(), set(), clock)
                        outs.append(res.outputs[0])
                elapsed = time.perf_counter() - t0
                if rep > 0:
                    times[name].append(sum(len(o) for o in outs) / elapsed)
                outputs[name] = outs
    same = {name: outputs[name] == outputs["hf_generate"] for name in engines}
    med = {name: statistics.median(v) for name, v in times.items()}
    spread = {name: (min(v), max(v)) for name, v in times.items()}
    return {"tokens_per_s_median": med, "tokens_per_s_min_max": spread, "identical_to_generate": same,
            "speedup_vs_generate": {n: med[n] / med["hf_generate"] for n in med}}


def cells_check(target: str, draft: str | None, tmp: Path, new_tokens: int) -> list[dict]:
    rows = []
    drafters = [make_drafter("ngram", d) for d in (2, 4)]
    if draft:
        drafters += [make_drafter("draft_model", d, name="draft", model=draft) for d in (2, 4)]
    for drafter in drafters:
        for batch in (1, 4):
            run = RunConfig(
                target=ModelConfig(name="target", path=target), drafter=drafter,
                dataset=DatasetConfig(name="smoke", path="smoke.jsonl"), backend=BackendConfig(num_threads=None),
                sampling=SamplingConfig(), batch_size=batch, max_new_tokens=new_tokens, results_dir=str(tmp),
                run_id="bench", per_category=False,
            )
            for c in run_cells(run, progress=False):
                rows.append({"drafter": c.drafter, "D": c.num_speculative_tokens, "B": c.batch_size, "al": c.al,
                             "speedup": c.speedup, "predicted": c.speedup_predicted,
                             "pred_error": abs(c.speedup / c.speedup_predicted - 1),
                             "overhead_pct": 100 * c.overhead_frac, "match": c.greedy_match_rate})
    return rows


def default_run_cost(tmp: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "speedbench.cli", "run", f"results_dir={tmp}", "run_id=default"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"returncode": proc.returncode, "wall_s": wall, "peak_rss_mb": rss_mb}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default=default_target())
    ap.add_argument("--draft", default=None, help="draft model path for draft_model cells")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-default-run", action="store_true")
    args = ap.parse_args()
    tok = models.load_tokenizer(args.target)
    requests = load_requests(DatasetSpec(path="smoke.jsonl"))
    prompts = [render_conversation(tok, [], r.turns[0], tokenize=True) for r in requests][:4]
    report = {"target": args.target, "torch_threads": torch.get_num_threads(), "new_tokens": args.new_tokens}
    report["decode"] = decode_speed(args.target, prompts, args.new_tokens, args.repeats)
    print(json.dumps(report["decode"], indent=2))
    with tempfile.TemporaryDirectory() as tmp:
        report["cells"] = cells_check(args.target, args.draft, Path(tmp), 64)
        for row in report["cells"]:
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        if not args.skip_default_run:
            report["default_run"] = default_run_cost(Path(tmp))
            print(report["default_run"])
    print(json.dumps(report, indent=2, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
