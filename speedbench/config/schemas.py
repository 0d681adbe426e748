"""Typed experiment configuration: the dataclass schemas of a run.

``config.hydra`` registers them in Hydra's ConfigStore (a typo or a wrong type fails at compose
time naming the key) and turns the composed config into a ``RunConfig``; everything below the
edge works on these plain dataclasses. Their values are checked by ``pipeline.validation``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING


class ConfigError(ValueError):
    """A run that cannot start; lists every problem."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        head = "invalid configuration" if len(self.problems) > 1 else ""
        text = "\n".join(f"  - {p}" for p in self.problems) if head else self.problems[0]
        super().__init__(f"{head} ({len(self.problems)} problem(s)):\n{text}" if head else text)


@dataclass
class ModelConfig:
    """A model: ``builtin:NAME`` (shipped), ``random:PRESET`` (built from config, seeded), a local dir or a hub id."""

    name: str = MISSING
    path: str = MISSING
    revision: Optional[str] = None
    dtype: str = "float32"
    trust_remote_code: bool = False  # off unless the user turns it on


@dataclass
class DrafterConfig:
    """The draft mechanism; ``method`` names it for every engine. Each method has its own schema below
    (``drafters.registry`` says which).

    ``engine_args``: keys passed as they are into the engine's speculative configuration (vLLM's
    ``speculative_config``), e.g. ``draft_tensor_parallel_size``; part of the cell's identity.
    """

    name: str = "none"
    method: str = "none"
    num_speculative_tokens: int = 0
    engine_args: dict[str, Any] = field(default_factory=dict)
    # synthetic acceptance (cost surface; not lossless): a mean AL, or conditional per-position rates.
    # Reference engine: forced after the real verify forward; vLLM: rejection_sample_method=synthetic (CUDA)
    synthetic_al: Optional[float] = None
    synthetic_rates: list[float] = field(default_factory=list)
    # how the synthetic counts are drawn: None/"quota" (the reference engine's systematic draws, close to
    # the profile in short runs) or "independent" (every row of every step its own draw, as vLLM's
    # synthetic sampler does: uncorrelated across steps and rows; engine.synthetic_acceptance)
    synthetic_draw: Optional[str] = None
    # draft length per live batch size: inclusive [start, end, K] ranges, as vLLM's
    # num_speculative_tokens_per_batch_size (engine.schedule); K is clamped to num_speculative_tokens
    schedule: list[Any] = field(default_factory=list)


@dataclass
class NgramDrafterConfig(DrafterConfig):
    """Prompt lookup: propose what followed the latest n-gram's earliest earlier occurrence."""

    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4


@dataclass
class SuffixDrafterConfig(DrafterConfig):
    """Suffix decoding: suffix trees over the prompt and the run's earlier outputs; the best-scored
    continuation of the longest useful match is proposed (vLLM's ``suffix_decoding_*`` keys)."""

    max_tree_depth: int = 24  # the trees hold substrings up to this long; the match uses this many recent tokens
    max_cached_requests: int = 10000  # responses kept in the shared (global) tree; 0: prompt trees only
    max_spec_factor: float = 1.0  # at most max_spec_factor x match length tokens are proposed
    min_token_prob: float = 0.1  # stop where the estimated probability of the path falls below this


@dataclass
class ModelDrafterConfig(DrafterConfig):
    """A drafter with weights of its own: draft_model, pard, eagle, eagle3, medusa, mtp, dflash, ..."""

    model: Optional[str] = None  # path, hub id or builtin:NAME (mtp: the target's own heads when unset)


@dataclass
class LayerSkipDrafterConfig(DrafterConfig):
    """Self-speculation: the target's first ``num_layers`` layers (with its norm and head) draft."""

    num_layers: int = 1


@dataclass
class FaultConfig:
    """Fault injection for testing the gate (never in a benchmark): not part of any cell's identity.

    ``delay_ms``: every draft phase of the reference engine takes this much longer (inside the
    timed draft phase); acceptance and output are unchanged, only time moves.
    """

    delay_ms: float = 0.0


@dataclass
class DatasetConfig:
    name: str = "smoke"
    source: str = "local"  # local | speed_bench | spec_bench | mt_bench | generic | agentic
    path: str = "smoke.jsonl"
    config: Optional[str] = None  # e.g. SPEED-Bench "qualitative", "throughput_1k"
    split: str = "test"
    categories: list[str] = field(default_factory=list)  # empty = all
    tier: str = "all"  # low | mixed | high | all: keep only prompts of this entropy tier (throughput splits)
    n_requests: Optional[int] = None  # stratified across categories with ``seed``
    seed: int = 0
    column_map: dict[str, str] = field(default_factory=dict)
    max_prompt_tokens: Optional[int] = None  # None: the target's context - max_new_tokens - D (chat-templated)
    on_too_long: str = "error"  # error | skip | truncate: a prompt over the limit
    control_tokens: str = "refuse"  # refuse | escape | keep: prompt text holding the tokenizer's control strings
    input_len: Optional[int] = None  # source=random: prompt token ids per request
    output_len: Optional[int] = None  # source=random: output tokens (must equal max_new_tokens; None: it)


@dataclass
class SamplingConfig:
    name: str = "greedy"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0


@dataclass
class BackendConfig:
    """The engine. ``options`` holds its own settings, typed per engine in ``config.engine_options``."""

    name: str = "torch"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    impl: str = "auto"  # torch backend: auto (lean when supported) | lean | hf
    num_threads: Optional[int] = None  # torch CPU threads for the in-process engines (torch, hf; vllm with options.lockstep on a CPU)
    options: Any = field(default_factory=dict)


def unknown_backend(name: str, known) -> str:
    """The one line refusing ``backend.name`` when no backend has that name."""
    return f"backend.name={name!r} is not a known backend; known: {sorted(known)}"


@dataclass
class LoggerConfig:
    name: str = "none"
    project: str = "speedbench"
    mode: str = "offline"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepConfig:
    name: str = "none"
    allowed_failure_frac: float = 0.0


INTERLEAVE = ("step", "pass")
CELL_ORDERS = ("rounds", "cells")


@dataclass
class ProtocolConfig:
    """How a cell is measured (``pipeline.protocol``); not part of a cell's identity.

    ``interleave=step`` (engines that can: the reference engine, HF generate, offline vLLM on its
    CPU build): a block's baseline and speculative passes run in lockstep, taking turns at
    iteration boundaries, each on its own clock (``engine.clock.Lockstep``). ``pass`` (every other
    engine, and on request; each cell's ``extra.protocol.why_pass`` says why): the two passes of
    a block run back to back. Either way blocks go in ABBA order (a block = one batch
    of B requests; for servers, the whole cell), repeated until the speedup's interval
    measurement noise (interval half-width with the prompts held fixed) is within
    ``target_rel_half_width`` of it (after ``min_repeats``), or ``max_repeats`` or the cell's
    ``budget_s`` is reached.
    """

    interleave: str = "step"  # step | pass (see above); step falls back to pass where the engine cannot
    # rounds: round r runs one repeat of every cell still measuring, so each cell's repeats spread over the
    # whole run and sample the machine's drift (pipeline.protocol.in_rounds); cells: each cell's repeats back
    # to back, one cell after the other. A cell is written as soon as it stops, either way.
    cell_order: str = "rounds"
    min_repeats: int = 2
    max_repeats: int = 6
    target_rel_half_width: float = 0.02  # 2%: the measurement noise a cell must reach to be "stable"
    budget_s: float = 3.0  # seconds of a cell's own passes after which it starts no new repeat (default run ~2x)
    confidence: float = 0.95
    n_resamples: int = 1000
    min_cpu_util: float = 0.85  # below: the engine's threads were waiting for a CPU (contention)
    max_load_per_cpu: float = 1.25  # 1-min load average per CPU above which a cell is flagged
    # Relative SD of the run-to-run offset: reruns of the same run disagree by more than any one run's
    # repeats show (scripts/default_reruns.py prints it as "per-process component"; 0.5-3.9% for the
    # default run on a quiet 2-core VM with cell_order=rounds, 2.5-3.6% with cells). Not the process:
    # five runs in one process drifted as much (geometric mean 1.107 down to 1.052 in 3 minutes); the
    # shared machine's state moves over minutes and the speedup with it, and a run samples one stretch.
    # Added to speedup_ci_low/high in quadrature (metrics.speedup.widen); not to the noise, which decides
    # ``stable``. 0 gives the run's own interval alone.
    process_noise: float = 0.02


@dataclass
class AcceptanceConfig:
    """How acceptance is analysed (``metrics``, docs/acceptance.md); not part of a cell's identity.

    ``window``: output positions per bin of the cell's ``al_by_position`` (None: about 8 bins over the
    output the cell measured, at most 16 positions each: ``metrics.acceptance.auto_window``). The degenerate-output
    rule (``metrics.degenerate_output``): a turn is degenerate when its output ends in a loop, a
    block of at most ``loop_max_period`` tokens repeated back to back at least
    ``loop_min_repeats`` times, covering at least ``loop_min_tokens`` tokens and at least
    ``loop_min_frac`` of the turn's output. A cell is flagged ``degenerate`` when more than
    ``degenerate_max_frac`` of its requests are. ``context_edges``: the lower edges (tokens) of the
    live-context buckets of ``extra.by_context`` (``metrics.buckets``; empty: powers of two).
    """

    window: Optional[int] = None
    loop_max_period: int = 32
    loop_min_repeats: int = 3
    loop_min_tokens: int = 16
    loop_min_frac: float = 0.5
    degenerate_max_frac: float = 0.0
    context_edges: list[int] = field(default_factory=list)  # live-context bucket lower edges (tokens); empty: powers of two


@dataclass
class LoadConfig:
    """A load point (``pipeline.load``): closed loop (``concurrency`` requests in flight) and/or
    open loop (``request_rate`` arrivals per second, gamma inter-arrivals of shape ``burstiness``;
    1.0 = Poisson). Unset (the defaults): today's batch semantics and cell ids."""

    concurrency: Optional[int] = None  # C in flight (servers); offline vLLM: batches of C / max_num_seqs=C
    request_rate: float = float("inf")  # requests/s; inf = all at once (bounded by the in-flight C or B)
    burstiness: float = 1.0  # gamma shape of the inter-arrival times (1.0 = Poisson)
    num_requests: Optional[int] = None  # requests per point (the cell's prompts cycled or cut); None: the cell's
    warmup_requests: Optional[int] = None  # warm-up requests before the point (excluded); None: warmup_batches x B
    duration_s: Optional[float] = None  # seconds per window instead of num_requests: the request count is sized once
    steady_state: bool = False  # count only each pass's steady window (metrics.steady): no ramp, no drain


@dataclass
class SloConfig:
    """Service-level objectives for ``goodput_*`` (requests/s meeting every objective set); unset: no goodput."""

    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None
    e2e_ms: Optional[float] = None


@dataclass
class RunConfig:
    target: ModelConfig = MISSING
    drafter: DrafterConfig = MISSING  # one of the per-method schemas (``drafters.registry``)
    dataset: DatasetConfig = MISSING
    backend: BackendConfig = MISSING
    sampling: SamplingConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    batch_size: int = 1
    max_new_tokens: int = 64
    ignore_eos: bool = False
    warmup_batches: int = 1
    results_dir: str = "results/runs"
    run_id: str = MISSING
    resume: bool = True
    per_category: bool = True
    n_gpus: int = 1  # GPUs one cell's engine uses (tokens/s per device, a Slurm job's GPUs); recorded 0 on a CPU
    seed: int = 0
    progress: str = "auto"  # progress bars: auto (only on a terminal) | true | false
