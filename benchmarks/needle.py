"""Needle retrieval of a target at each context length. Numbers go into docs, not tests.

Builds the throughput builder's ``needle`` prompts (mixed tier: "the access code for the PLACE
is CODE" hidden in filler at a random depth, the question at the end) at each size, runs them
through the chat template and the reference engine (greedy, no drafter) and counts the prompts
whose output contains the planted code. Also prints prefill and decode wall time per prompt
and the process's peak RSS.

    python benchmarks/needle.py [--target builtin:tiny-target] [--sizes 1k] [--n 10]   # a long-context target: --sizes 1k 8k 32k
    python benchmarks/needle.py --target builtin:tiny-long-target --sizes 8k 32k --engine vllm   # the same prompts on vLLM
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


def run_size_vllm(llm, tokenizer, size: str, n: int, seed: int, new_tokens: int) -> dict:
    """``run_size`` on a vLLM engine (greedy; one prompt at a time, so wall time is per prompt)."""
    from vllm import SamplingParams as VllmSampling
    from vllm.inputs import TokensPrompt

    found, wall, samples = 0, [], []
    for text, code in needle_prompts(tokenizer, size, n, seed):
        ids = render_conversation(tokenizer, [], text, tokenize=True)
        t0 = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=ids)], VllmSampling(temperature=0, max_tokens=new_tokens),
                           use_tqdm=False)
        wall.append(time.perf_counter() - t0)
        reply = out[0].outputs[0].text
        found += code in reply
        samples.append(f"{code!r} -> {reply.strip()[:80]!r}")
    return {"size": size, "prompt_tokens": len(ids), "found": found, "n": n, "share": found / n,
            "wall_s_mean": sum(wall) / n, "samples": samples}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="builtin:tiny-target")
    ap.add_argument("--sizes", nargs="+", default=["1k"])
    ap.add_argument("--n", type=int, default=10, help="needle prompts per size")
    ap.add_argument("--seed", type=int, default=1, help="builder seed (the shipped splits use 0)")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", choices=["reference", "vllm"], default="reference")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = models.load_tokenizer(args.target)
    if args.engine == "vllm":
        from vllm import LLM

        path = str(models.resolve_path(args.target))
        llm = LLM(model=path, dtype="float32", enforce_eager=True, max_num_batched_tokens=65536, seed=0,
                  kv_cache_memory_bytes=1 << 30)
    else:
        model = models.load_model(args.target)
    for size in args.sizes:
        t0 = time.perf_counter()
        if args.engine == "vllm":
            r = run_size_vllm(llm, tokenizer, size, args.n, args.seed, args.new_tokens)
            timing = f"{r['wall_s_mean']:.2f} s per prompt (prefill and decode)"
        else:
            r = run_size(model, tokenizer, size, args.n, args.seed, args.new_tokens)
            timing = (f"prefill {r['prefill_s_mean']:.2f} s, decode {1000 * r['decode_s_per_token_mean']:.1f} ms/token "
                      "(means per prompt)")
        print(f"{size}: {r['found']}/{r['n']} found ({r['share']:.0%}) [{args.engine}]; {r['prompt_tokens']} prompt "
              f"tokens; {timing}; {time.perf_counter() - t0:.0f} s for the size", flush=True)
        for line in r["samples"][:3]:
            print("   ", line)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
