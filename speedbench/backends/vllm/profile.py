"""Draft vs verification time from vLLM's own profiler scopes, in a separate profiled pass.

vLLM's V1 model runner (also the CPU runner) wraps each engine iteration's phases in
``record_function`` scopes when ``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``: ``gpu_model_runner:
forward`` (the target forward = verification of B*(1+D) tokens) and ``gpu_model_runner: draft``
(the proposer). A torch-profiler trace of one extra batch gives their durations per iteration.
The first iteration (prompt prefill) is dropped. These are host-side durations: on CPU they are
the compute time; on CUDA, kernels run asynchronously, so the split is not read there.
The profiled pass is never the measured one (the profiler slows every op).
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import time
from pathlib import Path

import numpy as np

SCOPES = {"draft": "gpu_model_runner: draft", "verify": "gpu_model_runner: forward"}
ENV = "VLLM_CUSTOM_SCOPES_FOR_PROFILING"


def profiler_config(trace_dir: str) -> dict:
    return {"profiler": "torch", "torch_profiler_dir": str(Path(trace_dir).resolve()),
            "torch_profiler_with_stack": False, "torch_profiler_use_gzip": False,
            "torch_profiler_dump_cuda_time_total": False}


def scope_durations(trace: dict) -> dict[str, list[float]]:
    """Seconds per occurrence of each scope, in time order."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("name") in SCOPES.values()]
    events.sort(key=lambda e: e.get("ts", 0))
    out: dict[str, list[float]] = {k: [] for k in SCOPES}
    for e in events:
        for key, name in SCOPES.items():
            if e["name"] == name:
                out[key].append(float(e["dur"]) * 1e-6)
    return out


def stats_ms(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float) * 1e3
    return {"mean": float(arr.mean()), "p50": float(np.median(arr)), "p90": float(np.percentile(arr, 90)), "n": len(arr)}


def profile_split(llm, run_pass, trace_dir: str) -> dict:
    """Run ``run_pass()`` under the engine's profiler and summarise the draft/forward scopes (ms)."""
    since = time.time()
    llm.start_profile()
    try:
        run_pass()
    finally:
        with contextlib.redirect_stdout(io.StringIO()):  # an in-process engine prints its profiler tables here
            llm.stop_profile()
    files = [p for p in Path(trace_dir).glob("rank0*.pt.trace.json*") if p.stat().st_mtime >= since - 1]
    if not files:
        return {"status": "missing: the profiler wrote no trace"}
    path = max(files, key=lambda p: p.stat().st_mtime)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    for p in files:  # traces are large; the numbers are kept, the files are not
        p.unlink(missing_ok=True)
    durations = {k: v[1:] for k, v in scope_durations(trace).items()}  # first iteration = prefill
    if not durations["verify"]:
        return {"status": f"missing: no '{SCOPES['verify']}' scope in the trace (V2 model runner, or {ENV} unset)"}
    out = {"status": "measured", "verify": stats_ms(durations["verify"])}
    if durations["draft"]:
        out["draft"] = stats_ms(durations["draft"])
    return out
