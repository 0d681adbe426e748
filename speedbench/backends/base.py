"""The engine interface: a backend generates one turn for a batch of conversations.

A backend is built once from (target, engine settings, seed) and is not changed afterwards;
a sweep reuses it for every cell that shares them. It does one thing: given the prompts of
one turn of a batch (``TurnInput``), generate and report what the engine did, per request,
as a ``TurnResult``: output token ids, timestamps and per-step counts (``StepCounts``).

Everything else lives above the backends, once, in ``pipeline.conversations``: multi-turn
conversations (the engine's reply appended before the next user turn), batching, folding
turns into ``RequestRecord``/``StepRecord`` rows, failures as data. Static-batch engines
implement :meth:`Session.run_turns`; per-request servers (``servers=True`` in their
``backends.registry`` entry, read as ``Backend.asynchronous``) implement :meth:`Session.run_turn_async`.

Backends are registered by name with lazy imports (``backends.registry``): ``backend=torch``
never imports vLLM.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, is_dataclass, replace
from typing import Any, Callable, ClassVar, Optional

from ..config import BackendConfig, DrafterConfig, FaultConfig, ModelConfig, SamplingConfig
from ..records import Request, RequestRecord, StepRecord

NAN = math.nan


@dataclass(frozen=True)
class GenerateSpec:
    """Everything one measured pass needs besides the requests: the same for baseline and speculative runs."""

    drafter: DrafterConfig
    batch_size: int
    sampling: SamplingConfig
    max_new_tokens: int
    ignore_eos: bool
    role: str  # "baseline" | "spec" | "warmup"
    progress: Optional[Callable[[int], None]] = None  # called with the number of requests just finished
    faults: FaultConfig = field(default_factory=FaultConfig)  # test-only fault injection; never in a cell id
    repeat: int = 0  # the measurement repeat this pass belongs to (records carry it)
    extras: bool = True  # False: skip per-pass side measurements (e.g. vLLM's profiled split) for this pass
    log_dir: Optional[str] = None  # the run's results folder: engines put their own output (logs) under it
    load: Any = None  # config.LoadConfig of the point (arrivals for servers); None: all at once


@dataclass(frozen=True)
class TurnInput:
    """One user turn of one conversation, rendered for the engine."""

    request: Request
    turn: int  # 0-based index of the user turn
    prompt: Any  # what the session's ``render`` returned: token ids, or chat messages for a server
    history: tuple[tuple[str, "TurnResult"], ...] = ()  # earlier (user text, engine reply) pairs


@dataclass
class StepCounts:
    """One target iteration of one sequence as an engine reported it."""

    drafted: int
    accepted: int
    emitted: int = -1  # tokens the step emitted (accepted + 1 unless the engine says otherwise)
    t_step: float = NAN  # seconds; NaN where the engine gives no per-step time
    t_draft: float = NAN
    t_verify: float = NAN
    t_accept: float = NAN
    verify_tokens: int = -1  # tokens in flight in the verification forward; -1 unknown
    iteration: int = -1  # id of the target forward within one ``run_turns`` call (shared by a batch's rows)
    kept: int = -1  # tokens of this step the output kept (a stop token or max_new_tokens cut the rest); -1: not known
    live_batch: int = -1  # sequences in the engine's forward of this step; -1: not known

    def __post_init__(self) -> None:
        if self.emitted < 0:
            self.emitted = self.accepted + 1


@dataclass
class TurnResult:
    """One request's answer to one user turn."""

    output_ids: list[int]
    prompt_tokens: int
    ttft: float  # seconds, submission -> first token
    decode_s: float  # seconds, first token -> last token
    e2e: float  # seconds, submission -> last token
    steps: list[StepCounts] | None = None  # None: the engine gave no per-step acceptance
    al_source: str = "steps"
    text: str | None = None  # the reply as text when the engine gave it (a server); else decoded from ids
    # pooled counters, for sources that give totals without per-step detail ("counters")
    n_drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    hist: list[int] = field(default_factory=list)
    # False: ``steps`` are timing rows only and acceptance comes from the pooled counts above
    counts_from_steps: bool = True
    # the stream as a client would see it: tokens per chunk (the prefill's token first); None: not known
    chunks: list[int] | None = None
    finish: str = ""  # "stop" (a stop token ended the turn) | "length" (max_new_tokens) | "" not known
    lead_tokens: int = 1  # output tokens before the first listed step (the prefill's token)
    t_send: float = NAN  # perf_counter when the turn was sent (servers); NaN: not known
    chunk_gaps: list[float] | None = None  # seconds between consecutive streamed chunks with tokens (ITL)


def finish_reason(output: list[int], stop_ids, max_new_tokens: int) -> str:
    """How a turn ended, read from its output: "stop" (its last token is a stop token), "length"
    (max_new_tokens tokens), else "" (not known)."""
    if output and output[-1] in stop_ids:
        return "stop"
    return "length" if len(output) >= max_new_tokens else ""


def cut_to_output(steps: list[StepCounts], n_output: int, lead: int = 1) -> bool:
    """Fill ``kept`` for engines that report per-step counts before truncation: the output is
    ``lead`` tokens and then every step's ``emitted`` tokens, so tokens beyond ``n_output`` were
    cut from the last steps. Returns False (``kept`` left unknown) when the counts do not
    account for the output (e.g. steps without a proposal are not listed)."""
    total = lead + sum(s.emitted for s in steps)
    if total < n_output or (steps and total - steps[-1].emitted >= n_output):
        return False
    left = n_output - lead
    for s in steps:
        s.kept = max(0, min(s.emitted, left))
        left -= s.kept
    return True


@dataclass
class GenerateOutput:
    requests: list[RequestRecord]
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = NAN
    extra: dict[str, Any] = field(default_factory=dict)  # engine-side counters, notes


class TurnStepper(ABC):
    """One pass on an engine the caller steps one iteration at a time (``pipeline.conversations``'
    in-process load driver): turns go in at any step boundary, finished turns come out of ``step``.
    Every time is on the pass's own clock (``now``), which ``idle_until`` moves on over idle time."""

    @abstractmethod
    def now(self) -> float: ...

    @abstractmethod
    def idle_until(self, t: float) -> None: ...

    @abstractmethod
    def add(self, turn: TurnInput, t_send: float) -> Any:
        """Submit one turn sent at ``t_send`` (<= now); returns its key."""

    @abstractmethod
    def busy(self) -> bool: ...

    @abstractmethod
    def step(self) -> list[tuple[Any, TurnResult]]:
        """One engine iteration; the turns it finished, as (key, result)."""

    @abstractmethod
    def in_flight_tokens(self) -> int:
        """Output tokens made so far by the turns not yet finished (the lockstep's progress between finishes)."""

    @abstractmethod
    def checkpoint(self, progress: float) -> None:
        """An iteration boundary of the pass (a lockstep partner may take the turn)."""

    @abstractmethod
    def close(self) -> None:
        """The pass is over: attach what the engine reports per pass (timers, counters)."""


class Session:
    """One measured pass (one ``GenerateSpec``) on a backend: drafter built, clocks and counters set."""

    wall_s: float | None = None  # a simulated engine reports its own elapsed time; None: the driver's clock

    def __init__(self, backend: "Backend", spec: GenerateSpec) -> None:
        self.backend, self.spec = backend, spec

    def render(self, history: list[tuple[str, TurnResult]], user: str) -> Any:
        """The prompt of the next turn: the conversation so far (with the engine's own replies) + ``user``."""
        from ..data.chat import render_conversation

        tok = self.backend.tokenizer
        return render_conversation(tok, [(u, self.reply_text(r)) for u, r in history], user, tokenize=True)

    def reply_text(self, result: TurnResult) -> str:
        if result.text is not None:
            return result.text
        return self.backend.tokenizer.decode(result.output_ids, skip_special_tokens=True)

    def group_size(self, n_requests: int) -> int:
        """Static-batch engines: conversations per ``run_turns`` call (B; an engine that batches
        continuously itself takes all ``n_requests`` of the pass at once)."""
        return self.spec.batch_size

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        """Static-batch engines: generate one turn for every input together (one result each, in order)."""
        raise NotImplementedError

    async def start(self) -> None:  # asynchronous backends: open clients inside the event loop
        pass

    async def arrive(self, index: int) -> None:
        """Asynchronous backends: wait until request ``index`` of the pass is due (open-loop arrivals)."""

    async def run_turn_async(self, turn: TurnInput) -> TurnResult:
        """Per-request engines: generate one turn of one conversation."""
        raise NotImplementedError

    async def stop(self) -> None:
        pass

    def stepper(self) -> "TurnStepper | None":
        """Engines stepped by the caller (in-process load points): the pass's stepper; None: not steppable."""
        return None

    def finish(self, records: list[RequestRecord], steps: list[StepRecord]) -> dict[str, Any]:
        """Engine-side notes and counters for the pass (``GenerateOutput.extra``)."""
        return {}


class Backend(ABC):
    """One engine with one target model loaded; immutable after construction."""

    in_process: ClassVar[bool] = False  # True: the engine computes in this process (its CPU time is ours)
    lockstep: ClassVar[bool] = False  # True: its loop calls Clock.begin/checkpoint (protocol.interleave=step)
    # True: its passes compute under torch.inference_mode (a lockstep then holds it around both: the
    # two passes are greenlets on one thread, whose grad-mode state they share)
    inference_passes: ClassVar[bool] = False
    # why its passes cannot step in turn (extra.protocol.why_pass of its cells)
    no_lockstep: ClassVar[str] = "its loop runs a batch to its end: no iteration boundary to hand over at"
    submits_all: bool = False  # True: a pass submits every request at once (continuous batching): one block per cell
    steps_load_points: bool = False  # True: its sessions give a ``TurnStepper`` (in-process load points)
    tokenizer: Any = None

    def __init__(self, target: ModelConfig, engine: BackendConfig, seed: int = 0) -> None:
        if not is_dataclass(engine.options):  # a config built in code: type (and check) its options here
            from ..config.hydra import typed
            from .registry import option_schema

            engine = replace(engine, options=typed(option_schema(engine.name), dict(engine.options or {}), "backend.options"))
        self.target, self.engine, self.seed = target, engine, seed

    @property
    def name(self) -> str:
        """Its ``backends.registry`` name (the key of its entry; no class repeats it)."""
        return self.engine.name

    @property
    def wall_clock(self) -> bool:
        """False: times are simulated (``BackendEntry.simulated``), so the machine's load cannot move them."""
        from .registry import entry

        return not entry(self.engine.name).simulated

    @property
    def asynchronous(self) -> bool:
        """True: requests run one by one, B at a time (a server backend: its ``BackendEntry.servers``)."""
        from .registry import entry

        return entry(self.engine.name).servers

    @classmethod
    def preflight(cls, engine: BackendConfig, batch_size: int, drafter: DrafterConfig | None = None) -> list[str]:
        """Problems with these engine settings (and, when given, ``drafter`` at ``batch_size``) found
        without building the engine: no model loads, no server is contacted. The validation pass
        asks it once per job, before anything runs; the rules every engine shares (methods,
        refusals, draft models, schedules) are the registries' and the validation pass's."""
        return []

    def ready(self, drafter: DrafterConfig, batch_size: int) -> None:  # noqa: B027 - optional
        """Make the engine ready to run ``drafter`` at ``batch_size`` before a pass (servers start here)."""

    @abstractmethod
    def session(self, spec: GenerateSpec) -> Session:
        """A session for one measured pass."""

    def info(self) -> dict[str, Any]:
        return {"backend": self.name}

    def attach_run_folder(self, folder) -> None:  # noqa: B027 - optional
        """The run's results folder, before the first :meth:`ready` (engines that start processes log there)."""

    def close(self) -> None:  # noqa: B027
        pass


def default_cpu_threads() -> int:
    """Compute threads for an in-process engine on the CPU when ``backend.num_threads`` is unset.

    On a small machine (<= 4 CPUs) one thread, so that the harness, the OS and a neighbour
    never preempt the engine mid-forward (torch's default of one thread per core makes every
    forward wait for the slowest core); larger machines keep torch's default.
    """
    import torch

    return 1 if cpu_count() <= 4 else torch.get_num_threads()


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def device_problems(engine: BackendConfig) -> list[str]:
    """``backend.device`` against this machine (in-process engines)."""
    from .. import models

    try:
        models.pick_device(engine.device)
    except RuntimeError as exc:
        return [str(exc)]
    return []
