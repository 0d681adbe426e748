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
import math
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
    """One request's final output with its times on the pass's own clock (seconds): TTFT from its
    send, decode = first -> last token, and the chunks a streaming client would have seen (one
    per engine step that gave it tokens: their token counts and the gaps between them)."""

    output: object  # vLLM's RequestOutput (finished)
    ttft: float
    decode_s: float
    t_send: float = float("nan")
    chunks: tuple[int, ...] = ()
    chunk_gaps: tuple[float, ...] = ()


@dataclass
class _Track:
    t_send: float
    made: int = 0
    first: float = float("nan")
    last: float = float("nan")
    chunks: list = None
    gaps: list = None

    def __post_init__(self) -> None:
        self.chunks, self.gaps = [], []

    def tokens(self, n: int, now: float) -> None:
        if n <= self.made:
            return
        if self.chunks:
            self.gaps.append(now - self.last)
        else:
            self.first = now
        self.chunks.append(n - self.made)
        self.made, self.last = n, now

    def done(self, output) -> Stepped:
        started = math.isfinite(self.first)
        return Stepped(output, self.first - self.t_send if started else float("nan"),
                       self.last - self.first if started else float("nan"), self.t_send, tuple(self.chunks), tuple(self.gaps))


class Stepper:
    """One vLLM engine (its core in this process) stepped by the caller, on the pass's own clock.

    ``add`` submits a request at a step boundary with its send time; ``step`` runs one engine
    iteration and returns the requests it finished; ``idle_until`` moves the pass's clock to a later
    arrival when the engine has nothing to do (idle time is elapsed time of the pass, not compute).
    ``now`` = the pass's own clock since the stepper opened + the idle time skipped."""

    def __init__(self, llm, params) -> None:
        from vllm.sampling_params import RequestOutputKind

        self.engine = llm.llm_engine
        self.params = params.clone()
        self.params.output_kind = RequestOutputKind.CUMULATIVE  # every step's output: each chunk's step
        self.clock = Clock("cpu")  # checkpoint only: step() returns once the step's tokens are on the host
        self.t0 = own_time()
        self.idle_s = 0.0
        self.tracks: dict[str, _Track] = {}

    def now(self) -> float:
        return own_time() - self.t0 + self.idle_s

    def idle_until(self, t: float) -> None:
        gap = t - self.now()
        if gap > 0:
            self.idle_s += gap

    def add(self, prompt: list[int], t_send: float | None = None) -> str:
        from vllm.inputs import TokensPrompt

        rid = f"sb-{next(_ids)}"
        self.tracks[rid] = _Track(self.now() if t_send is None else t_send)
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt), self.params)
        return rid

    def busy(self) -> bool:
        return self.engine.has_unfinished_requests()

    def step(self) -> dict[str, Stepped]:
        """One engine iteration; the requests it finished (by id)."""
        outs = self.engine.step()
        now = self.now()
        done: dict[str, Stepped] = {}
        for o in outs:
            track = self.tracks.get(o.request_id)
            if track is None:
                continue
            track.tokens(len(o.outputs[0].token_ids), now)
            if o.finished:
                done[o.request_id] = self.tracks.pop(o.request_id).done(o)
        return done


def run_stepped(llm, prompts: list[list[int]], params) -> list[Stepped]:
    """Generate ``prompts`` (token ids) on ``llm`` one engine step at a time, all submitted at once."""
    stepper = Stepper(llm, params)
    stepper.clock.begin()
    ids = [stepper.add(p, 0.0) for p in prompts]
    budget = max(1, len(prompts) * int(params.max_tokens))
    made = 0
    final: dict[str, Stepped] = {}
    while stepper.busy():
        final |= stepper.step()
        made = sum(t.made for t in stepper.tracks.values()) + sum(len(d.output.outputs[0].token_ids) for d in final.values())
        stepper.clock.checkpoint(made / budget)  # the partner may step here
    return [final[rid] for rid in ids]
