"""``backend.options.lockstep`` (auto: on for vLLM's CPU build with one worker): a vLLM pass driven one engine
iteration at a time, so that the protocol's lockstep (``engine.clock.Lockstep``) pairs the
baseline and speculative engines step by step, as it pairs the reference engine's passes.

``LLM.generate`` runs a batch to its end, and with the engine core in a process of its own (vLLM's
default) that process iterates by itself whatever the caller does. With the engine core in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by the backend for this mode)
``LLMEngine.step()`` is exactly one iteration (schedule, execute, update outputs): the pass adds
its requests (``LLMEngine.add_request``), steps, reads the outputs, and calls
``Clock.checkpoint`` between two iterations, where the partner pass (the other engine, also in
this process) may take the turn; the one behind in output goes next.

Every time of a stepped pass is read on the pass's own clock (``engine.clock.own_time``, which only
advances while the pass holds the turn): TTFT = end of the step that gave a request's first token
- submission; decode = its last token's step - its first. vLLM's own timestamps
(``RequestOutput.metrics``) span the partner's turns too and are not used here. The model-runner
timers run in this process as well and read the same clock (``timers``).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
from dataclasses import dataclass

from ...engine.clock import Clock, own_time

ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"  # "0": the engine core in this process, stepped by the caller
_ids = itertools.count()
_SET: dict[str, str] = {}  # what enter_process set in os.environ (child processes do not inherit it)


def enter_process(threads: int | None) -> None:
    """Put vLLM's engine cores in this process (read when each engine starts, and frozen by vLLM's
    env cache once the first one has). ``threads`` (CPU): the compute threads of the forwards,
    for torch and for numba, whose n-gram proposer resets this thread's OpenMP count to numba's
    default after every call (read from ``NUMBA_NUM_THREADS`` when vLLM first imports numba, else
    set on this thread)."""
    _SET[ENV] = "0"
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
        numba = sys.modules.get("numba")
        if numba is None:
            _SET["NUMBA_NUM_THREADS"] = str(threads)
        else:  # already loaded: a new NUMBA_NUM_THREADS would be refused once its threads run; set this thread's
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    os.environ.update(_SET)


def harness_env() -> dict[str, str]:
    return dict(_SET)


@contextlib.contextmanager
def engine_start_in_process():
    """Around the start of an engine in this process. vLLM's CPU platform rebinds its Triton
    kernels by scanning every module in ``sys.modules`` (``triton_utils.dispatcher``) and calls
    ``vars(value).get`` on each value that has a ``__dict__``; llvmlite's ``ffi.lib`` answers any
    attribute, ``__dict__`` included, with a function wrapper, and the scan raises AttributeError.
    An engine process of its own has not loaded llvmlite yet; this one has once numba (vLLM's
    n-gram proposer) ran, so the second engine with an n-gram drafter failed to start. Modules
    holding such a value leave ``sys.modules`` while the engine starts (every reference to them
    stays valid) and come back after."""
    hidden = {name: m for name, m in list(sys.modules.items()) if _breaks_the_scan(m)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _breaks_the_scan(module) -> bool:
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return False
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):  # the scan's own test
                return True
        except Exception:  # the scan would fail on it as well: nothing to hide
            continue
    return False


@dataclass
class Stepped:
    """One request's final output with its times on the pass's own clock (seconds)."""

    output: object  # vLLM's RequestOutput (finished)
    ttft: float
    decode_s: float


def run_stepped(llm, prompts: list[list[int]], params) -> list[Stepped]:
    """Generate ``prompts`` (token ids) on ``llm`` one engine step at a time, in order."""
    from vllm.inputs import TokensPrompt

    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    params = params.clone()
    params.output_kind = RequestOutputKind.CUMULATIVE  # every step's output: the first and last token's step
    clock = Clock("cpu")  # begin/checkpoint only: step() returns once the step's tokens are on the host
    clock.begin()
    t0 = own_time()
    ids = [f"sb-{next(_ids)}" for _ in prompts]
    for rid, prompt in zip(ids, prompts):
        engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), params)
    budget = max(1, len(prompts) * int(params.max_tokens))
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    made: dict[str, int] = {}
    final: dict[str, object] = {}
    while engine.has_unfinished_requests():
        outs = engine.step()
        now = own_time()
        for o in outs:
            n = len(o.outputs[0].token_ids)
            if n > made.get(o.request_id, 0):
                first.setdefault(o.request_id, now)
                last[o.request_id] = now
                made[o.request_id] = n
            if o.finished:
                final[o.request_id] = o
        clock.checkpoint(sum(made.values()) / budget)  # the partner may step here
    nan = float("nan")
    return [Stepped(final[rid], first[rid] - t0 if rid in first else nan,
                    last[rid] - first[rid] if rid in first else nan) for rid in ids]
