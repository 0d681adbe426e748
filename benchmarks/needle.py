"""Needle retrieval of a target at each context length. Numbers go into docs, not tests.

Builds the throughput builder's ``needle`` prompts (mixed tier: "the access code for the PLACE
is CODE" hidden in filler at a random depth, the question at the end) at each size, runs them
through the chat template and the reference engine (greedy, no drafter) and counts the prompts
whose output contains the planted code. Also prints prefill and decode wall time per prompt
and the process's peak RSS.

    python benchmarks/needle.py [--target builtin:tiny-target] [--sizes 1k] [--n 10]   # a long-context target: --sizes 1k 8k 32k
"""
from __future__ import annotations

import argparse
import re
import resource
import time

import torch

from speedbench import models
from speedbench.data.build import build_prompt
from speedbench.data.chat import render_conversation
from speedbench.drafters import build_drafter
from speedbench.engine.build import LMBuilder
from speedbench.engine.clock import Clock
from speedbench.engine.decode import generate
from speedbench.engine.drafting import DraftContext
from speedbench.engine.sampling import SamplingParams

FACT = re.compile(r"the access code for the (.+?) is (\S+?)\. Do not write it")


def needle_prompts(tokenizer, size: str, n: int, seed: int) -> list[tuple[str, str]]:
    """(prompt text, planted code) of ``n`` needle prompts (the mixed tier's even indices)."""
    out = []
    for i in range(n):
        text = build_prompt(tokenizer, size, "mixed", 2 * i, seed)["turns"][0]
        out.append((text, FACT.search(text).group(2)))
    return out


def run_size(model, tokenizer, size: str, n: int, seed: int, new_tokens: int) -> dict:
    clock = Clock("cpu")
    none = build_drafter("none", DraftContext(model, None, torch.device("cpu"), None), {})
    found, prefill, decode, samples = 0, [], [], []
    for text, code in needle_prompts(tokenizer, size, n, seed):
        ids = render_conversation(tokenizer, [], text, tokenize=True)
        with torch.inference_mode():
            res = generate(LMBuilder("lean")(model), none, [ids], 0, new_tokens, SamplingParams(),
                           {tokenizer.eos_token_id}, clock)
        reply = tokenizer.decode(res.outputs[0], skip_special_tokens=True)
        found += code in reply
        prefill.append(res.t_first - res.t_start)
        decode.append((res.t_last[0] - res.t_first) / max(1, len(res.outputs[0]) - 1))
        samples.append(f"{code!r} -> {reply.strip()[:80]!r}")
    return {"size": size, "prompt_tokens": len(ids), "found": found, "n": n, "share": found / n,
            "prefill_s_mean": sum(prefill) / n, "decode_s_per_token_mean": sum(decode) / n, "samples": samples}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="builtin:tiny-target")
    ap.add_argument("--sizes", nargs="+", default=["1k"])
    ap.add_argument("--n", type=int, default=10, help="needle prompts per size")
    ap.add_argument("--seed", type=int, default=1, help="builder seed (the shipped splits use 0)")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = models.load_model(args.target), models.load_tokenizer(args.target)
    for size in args.sizes:
        t0 = time.perf_counter()
        r = run_size(model, tokenizer, size, args.n, args.seed, args.new_tokens)
        print(f"{size}: {r['found']}/{r['n']} found ({r['share']:.0%}); {r['prompt_tokens']} prompt tokens; "
              f"prefill {r['prefill_s_mean']:.2f} s, decode {1000 * r['decode_s_per_token_mean']:.1f} ms/token "
              f"(means per prompt); {time.perf_counter() - t0:.0f} s for the size", flush=True)
        for line in r["samples"][:3]:
            print("   ", line)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
