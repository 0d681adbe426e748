"""``speedbench microbench gemm|attention|verify``: the kernels behind guidelines G1-G4 (docs/guidelines.md).

* ``gemm``: a linear layer [M, K] x [K, N] (N = K = 6144 by default) over M = B(1+D):
  achieved and normalised TFLOP/s (achieved / max achieved). Evidence for G1.
* ``attention``: decode attention (torch SDPA) at one context length over G(1+D) queries per
  KV head (the GQA group folded into the query rows, as decode kernels pack it). Runtime vs
  G(1+D) shows the 128-row tile staircase of G2/G3.
* ``verify``: T_verif(B(1+D)) on the real target through speedbench's engine (reset, prefill
  a context, time a forward of [B, 1+D] tokens, truncate back), and its ratio to T_verif(B).

Timing: warm-up calls first (not measured), a device sync before every clock read, the
median of ``--repeats`` calls. Results go to ``RESULTS_DIR/microbench/<kind>.parquet`` with
``<kind>.provenance.json`` beside it; the report reads them. Small sizes run on a CPU for
tests; the real figures need ``--device cuda --dtype bfloat16``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
from pathlib import Path
from typing import Any, Callable

TILE = 128


def _ints(text: str) -> list[int]:
    """``1,2,4`` or ``0-7`` or a mix: ``0-3,8,16``."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            out += list(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def time_call(fn: Callable[[], Any], device: str, warmup: int, repeats: int) -> tuple[float, float]:
    """(median, inter-quartile range) seconds of ``fn`` with device syncs around each call."""
    import numpy as np

    from ..engine.clock import Clock

    clock = Clock(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = clock.now()
        fn()
        times.append(clock.now() - t0)
    q25, q50, q75 = np.percentile(times, [25, 50, 75])
    return float(q50), float(q75 - q25)


def _setup(args) -> tuple[Any, Any]:
    import torch

    from ..models import DTYPES, pick_device

    from ..console import UsageError

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(sorted(DTYPES))}, got {args.dtype!r}")
    try:
        return pick_device(args.device), DTYPES[args.dtype]
    except RuntimeError as exc:
        raise UsageError(f"--device {args.device}: CUDA is not available on this machine (use --device cpu)") from exc


def run_gemm(args) -> "pd.DataFrame":  # noqa: F821
    import pandas as pd
    import torch
    import torch.nn.functional as F

    device, dtype = _setup(args)
    pairs = [(m, math.nan, math.nan) for m in _ints(args.m)] if args.m else [
        (b * (1 + d), b, d) for b in _ints(args.batch) for d in _ints(args.depth)
    ]
    gen = torch.Generator(device="cpu").manual_seed(0)
    w = torch.randn(args.n, args.k, generator=gen).to(device=device, dtype=dtype)
    measured: dict[int, tuple[float, float]] = {}
    for m in sorted({m for m, _, _ in pairs}):
        x = torch.randn(m, args.k, generator=gen).to(device=device, dtype=dtype)
        with torch.inference_mode():
            measured[m] = time_call(lambda x=x: F.linear(x, w), device, args.warmup, args.repeats)
    rows = []
    for m, b, d in pairs:
        t, spread = measured[m]
        rows.append(dict(m=m, n=args.n, k=args.k, batch=b, depth=d, time_s=t, time_iqr_s=spread,
                         tflops=2.0 * m * args.n * args.k / t / 1e12))
    frame = pd.DataFrame(rows)
    frame["normalised"] = frame["tflops"] / frame["tflops"].max()
    return frame.assign(device=device, dtype=args.dtype)


def run_attention(args) -> "pd.DataFrame":  # noqa: F821
    import pandas as pd
    import torch
    import torch.nn.functional as F

    device, dtype = _setup(args)
    if args.qpk:
        points = [(q, math.nan) for q in _ints(args.qpk)]
    else:
        points = [(args.group * (1 + d), d) for d in _ints(args.depth)]
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch, args.kv_heads, args.context, args.head_dim)
    k = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    rows = []
    for qpk, d in points:
        q = torch.randn(args.batch, args.kv_heads, qpk, args.head_dim, generator=gen).to(device=device, dtype=dtype)
        with torch.inference_mode():
            t, spread = time_call(lambda q=q: F.scaled_dot_product_attention(q, k, v), device, args.warmup, args.repeats)
        rows.append(dict(queries_per_kv_head=qpk, group=args.group, depth=d, tiles=math.ceil(qpk / TILE),
                         context=args.context, batch=args.batch, kv_heads=args.kv_heads, head_dim=args.head_dim,
                         time_s=t, time_iqr_s=spread))
    frame = pd.DataFrame(rows)
    frame["relative_time"] = frame["time_s"] / frame.loc[frame["queries_per_kv_head"].idxmin(), "time_s"]
    return frame.assign(device=device, dtype=args.dtype)


def run_verify(args) -> "pd.DataFrame":  # noqa: F821
    import pandas as pd
    import torch

    from ..models import load_model

    device, _ = _setup(args)
    model = load_model(args.target, args.dtype, device)
    from ..engine.build import LMBuilder

    lm = LMBuilder(args.impl)(model)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator(device="cpu").manual_seed(0)
    depths = _ints(args.depth)
    rows = []
    for batch in _ints(args.batch):
        with torch.inference_mode():
            lm.reset(batch, args.context + max(depths) + 2)
            lm.forward(torch.randint(0, vocab, (batch, args.context), generator=gen).to(device))
            base_lens = lm.lens.clone()
            for d in depths:
                toks = torch.randint(0, vocab, (batch, 1 + d), generator=gen).to(device)

                def step(toks=toks, base_lens=base_lens):
                    lm.forward(toks)
                    lm.truncate(base_lens)

                t, spread = time_call(step, device, args.warmup, args.repeats)
                rows.append(dict(batch=batch, depth=d, tokens=batch * (1 + d), context=args.context,
                                 time_s=t, time_iqr_s=spread, target=args.target, impl=type(lm).__name__))
    frame = pd.DataFrame(rows)
    base = frame[frame["depth"] == 0].set_index("batch")["time_s"]
    frame["ratio"] = frame["time_s"] / frame["batch"].map(base)  # T_verif(B(1+D)) / T_verif(B); NaN without D=0
    return frame.assign(device=device, dtype=args.dtype)


RUNNERS = {"gemm": run_gemm, "attention": run_attention, "verify": run_verify}


def write(frame, results_dir: str | Path, kind: str, args: argparse.Namespace) -> Path:
    from ..results import provenance
    from ..results.layout import RunFolder
    from ..results.store import atomic_write_parquet, atomic_write_text, dumps

    folder = RunFolder(results_dir)
    atomic_write_parquet(folder.microbench_path(kind), frame)
    config = {k: v for k, v in vars(args).items() if not k.startswith("_") and not callable(v)}
    device = str(frame["device"].iloc[0]) if len(frame) else "cpu"
    atomic_write_text(folder.microbench_provenance_path(kind), dumps(provenance.collect(config, {"microbench": kind}, device)))
    return folder.microbench_path(kind)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--results-dir", default=f"results/microbench-{stamp}", help="results folder to write into")
    common.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    common.add_argument("--dtype", default="float32", help="float32 | float16 | bfloat16 (GPU figures: bfloat16)")
    common.add_argument("--warmup", type=int, default=3)
    common.add_argument("--repeats", type=int, default=20)
    common.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    g = sub.add_parser("gemm", parents=[common], help="linear-layer TFLOP/s over M = B(1+D)")
    g.add_argument("--n", type=int, default=6144)
    g.add_argument("--k", type=int, default=6144)
    g.add_argument("--batch", default="1,2,4,8,16,32,64,128,256")
    g.add_argument("--depth", default="0-7", help="draft lengths D (ranges allowed: 0-7)")
    g.add_argument("--m", default=None, help="explicit M values instead of B x D")
    a = sub.add_parser("attention", parents=[common], help="decode attention runtime over G(1+D)")
    a.add_argument("--context", type=int, default=8192)
    a.add_argument("--kv-heads", type=int, default=8)
    a.add_argument("--head-dim", type=int, default=128)
    a.add_argument("--batch", type=int, default=1)
    a.add_argument("--group", type=int, default=8, help="G: query heads per KV head")
    a.add_argument("--depth", default="0-63")
    a.add_argument("--qpk", default=None, help="explicit queries-per-KV-head values instead of G(1+D)")
    v = sub.add_parser("verify", parents=[common], help="T_verif(B(1+D)) on the target via the engine")
    v.add_argument("--target", default="random:tiny-target", help="model path: builtin:, random:, folder or hub id")
    v.add_argument("--impl", default="auto", choices=("auto", "lean", "hf"))
    v.add_argument("--context", type=int, default=512)
    v.add_argument("--batch", default="1,4,16")
    v.add_argument("--depth", default="0,1,2,3,4,6,8")


def main(args: argparse.Namespace) -> int:
    frame = RUNNERS[args.kind](args)
    path = write(frame, args.results_dir, args.kind, args)
    cols = [c for c in ("m", "queries_per_kv_head", "batch", "depth", "tokens", "time_s", "tflops", "normalised",
                        "relative_time", "ratio") if c in frame]
    print(frame[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\nwrote {path}")
    return 0
