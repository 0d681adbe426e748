"""Each engine's own settings (``backend.options``), typed: a misspelt key fails when the config
is composed, naming it. Light on purpose (no engine imports); ``backends.registry`` names the
backend each belongs to.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


SPEC_METRICS = ("auto", "per_request", "counters")  # where acceptance comes from (vllm, vllm_serve)


def choice_problem(key: str, value: Any, allowed: tuple[str, ...], lower: bool = False) -> list[str]:
    """``backend.options.<key>`` against its allowed values (``lower``: compared case-insensitively)."""
    text = str(value).lower() if lower else str(value)
    if text in allowed:
        return []
    return [f"backend.options.{key} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}"]


@dataclass
class TorchOptions:
    """``backend=torch``: the reference engine has no options besides ``backend.impl`` and ``num_threads``."""


@dataclass
class VllmOptions:
    max_engines: int = 2  # engines alive at once in the process, any backend's (baseline + one speculative config)
    max_num_seqs: int = 8  # engine batch slots; raised to batch_size when larger
    spec_metrics: str = "auto"  # auto | per_request | counters: where acceptance comes from
    profile_split: str = "auto"  # auto (on for CPU when timers=false) | true | false: split from profiler scopes
    # draft/verify/accept timers in the model runner: auto (measured on CPU, separate on CUDA) |
    # measured (in the measured passes) | separate (one extra synced pass per call) | false
    timers: str = "auto"
    engine_args: dict[str, Any] = field(default_factory=dict)  # passed to vllm.LLM(...) as they are
    # static: one LLM.generate per batch of B (or load.concurrency C); continuous: every request of a
    # pass in one LLM.generate, the engine batching up to max_num_seqs = C itself
    batching: str = "static"
    # step-level lockstep of the baseline and speculative engines (both in this process, stepped through
    # LLMEngine.add_request/step; protocol.interleave=step; backends/vllm/stepped.py): auto (on for the CPU
    # build with one worker; CUDA not yet measured) | true | false (ABBA pass against pass)
    lockstep: str = "auto"

    def problems(self) -> list[str]:
        """Every value checked here, once (``VllmBackend.preflight`` reports them)."""
        p = choice_problem("spec_metrics", self.spec_metrics, SPEC_METRICS)
        if not isinstance(self.max_engines, int) or self.max_engines < 1:
            p.append(f"backend.options.max_engines must be >= 1, got {self.max_engines!r}")
        p += choice_problem("profile_split", self.profile_split, ("auto", "true", "false"), lower=True)
        p += choice_problem("timers", self.timers, ("auto", "measured", "separate", "false"), lower=True)
        p += choice_problem("batching", self.batching, ("static", "continuous"))
        p += choice_problem("lockstep", self.lockstep, ("auto", "true", "false"), lower=True)
        if str(self.lockstep).lower() == "true" and self.parallel_workers() > 1:
            p.append("backend.options.lockstep=true needs one worker (the engine steps in this process); "
                     f"engine_args asks for {self.parallel_workers()} (tensor/pipeline parallel): use lockstep=auto or false")
        return p

    def parallel_workers(self) -> int:
        """Worker processes the engine_args ask for (tensor x pipeline parallel size)."""
        a = self.engine_args or {}
        return int(a.get("tensor_parallel_size", 1) or 1) * int(a.get("pipeline_parallel_size", 1) or 1)


# backend.options keys that moved, and where to: refused with one line naming the new key (exit 2)
RETIRED_OPTIONS = {"request_rate": "load.request_rate"}


def retired_options(options: dict) -> list[str]:
    """One line for each retired key set in ``backend.options``."""
    return [f"backend.options.{key}={options[key]!r}: retired; set {new}={options[key]!r} instead"
            for key, new in RETIRED_OPTIONS.items() if options.get(key) is not None]


@dataclass
class OpenAIOptions:
    base_url: Optional[str] = None  # the speculative server, e.g. http://127.0.0.1:8000/v1
    baseline_url: Optional[str] = None  # a server of the same target without speculation
    model: Optional[str] = None  # the served model name (default: the server's first /models entry)
    api_key_env: Optional[str] = None  # name of the environment variable holding the API key
    endpoint: str = "completions"  # completions | chat
    request_rate: Optional[float] = None  # retired (RETIRED_OPTIONS): the request rate is load.request_rate
    timeout_s: float = 600.0  # bounds each read
    connect_timeout_s: float = 30.0
    first_token_timeout_s: Optional[float] = None  # default: timeout_s
    request_timeout_s: Optional[float] = None  # the whole request; default: 3 x timeout_s
    metrics: bool = True  # read /metrics counter deltas around each pass
    health_path: str = "/health"  # probed after a call that got no answer (backends.server_health); vllm_serve: readiness
    vllm_extensions: bool = True  # send vLLM's extra fields (return_token_ids, ignore_eos, top_k)
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class VllmServeOptions(OpenAIOptions):
    """``backend=vllm_serve``: the harness starts the baseline and speculative servers itself
    (``backends.server_set``) and measures them as ``backend=openai`` does; base_url and
    baseline_url are filled in by the harness (setting them is refused)."""

    server_command: list[str] = field(default_factory=lambda: ["python", "-m", "vllm.entrypoints.openai.api_server"])
    vllm_flags: bool = True  # add vLLM's flags (--model, --dtype, --speculative-config, ...); false: only the args below
    server_args: list[str] = field(default_factory=list)  # appended for every server ({model}, {draft_model}, ... filled)
    spec_server_args: list[str] = field(default_factory=list)  # appended for the speculative server only
    port_args: list[str] = field(default_factory=lambda: ["--host", "{host}", "--port", "{port}"])
    ready_timeout_s: float = 600.0  # launch -> health 200, per server
    max_engines: int = 2  # servers alive at once (baseline + one speculative config)
    max_num_seqs: int = 8  # --max-num-seqs; raised to the load's concurrency / batch size when larger
    spec_metrics: str = "auto"  # auto | per_request | counters (as backend=vllm)
    engine_args: dict[str, Any] = field(default_factory=dict)  # as --key-with-dashes value flags


@dataclass
class HFOptions:
    full_drafts: bool = True  # let HF draft D tokens even when fewer than D + 1 remain (as vLLM does)


@dataclass
class SyntheticOptions:
    """The seeded model of ``backend=synthetic`` (see that module for the formulas); times in ms."""

    alpha: float = 0.7
    alpha_by_category: dict[str, float] = field(default_factory=dict)
    alpha_by_method: dict[str, float] = field(default_factory=dict)
    verify_a_ms: float = 2.0
    verify_b_ms: float = 0.05
    verify_ctx_ms: float = 0.0
    draft_ms: float = 0.2
    draft_ms_by_method: dict[str, float] = field(default_factory=dict)
    parallel_methods: Optional[list[str]] = None  # None: the parallel methods of drafters.registry
    propose_prob_by_method: dict[str, float] = field(default_factory=dict)
    accept_ms: float = 0.05
    overhead_ms: float = 0.02
    prefill_ms_per_token: float = 0.01
    chars_per_token: float = 4
    noise: float = 0.0
    seed: int = 0
