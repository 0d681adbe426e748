"""Typed experiment configuration: dataclass schemas registered in Hydra's ConfigStore.

Hydra stays at the edge: ``cli`` composes ``conf/`` against these schemas (a typo or a
wrong type fails at compose time naming the key) and turns the result into a ``RunConfig``
with :func:`to_run_config`. Everything below works on plain dataclasses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf


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
    """The draft mechanism. ``method`` names it for every engine (none, ngram, draft_model, layer_skip, eagle3, ...)."""

    name: str = "none"
    method: str = "none"
    num_speculative_tokens: int = 0
    model: Optional[str] = None  # draft_model / eagle heads: path, hub id or builtin:NAME
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4
    num_layers: int = 1  # layer_skip: how many of the target's first layers draft
    options: dict[str, Any] = field(default_factory=dict)  # engine-specific pass-through


@dataclass
class DatasetConfig:
    name: str = "smoke"
    source: str = "local"  # local | speed_bench | spec_bench | mt_bench | generic
    path: str = "smoke.jsonl"
    config: Optional[str] = None  # e.g. SPEED-Bench "qualitative", "throughput_1k"
    split: str = "test"
    categories: list[str] = field(default_factory=list)  # empty = all
    n_requests: Optional[int] = None  # stratified across categories with ``seed``
    seed: int = 0
    column_map: dict[str, str] = field(default_factory=dict)
    max_prompt_tokens: Optional[int] = None  # None: the target's context - max_new_tokens - D (chat-templated)
    on_too_long: str = "error"  # error | skip | truncate: a prompt over the limit


@dataclass
class SamplingConfig:
    name: str = "greedy"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0


@dataclass
class BackendConfig:
    name: str = "torch"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    impl: str = "auto"  # torch backend: auto (lean when supported) | lean | hf
    num_threads: Optional[int] = None
    options: dict[str, Any] = field(default_factory=dict)  # engine arguments pass-through


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


@dataclass
class RunConfig:
    target: ModelConfig = MISSING
    drafter: DrafterConfig = MISSING
    dataset: DatasetConfig = MISSING
    backend: BackendConfig = MISSING
    sampling: SamplingConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    batch_size: int = 1
    max_new_tokens: int = 64
    ignore_eos: bool = False
    warmup_batches: int = 1
    results_dir: str = "results/runs"
    run_id: str = MISSING
    resume: bool = True
    per_category: bool = True
    n_gpus: int = 1
    seed: int = 0


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in [
        ("target", ModelConfig),
        ("drafter", DrafterConfig),
        ("dataset", DatasetConfig),
        ("sampling", SamplingConfig),
        ("backend", BackendConfig),
        ("logger", LoggerConfig),
        ("sweep", SweepConfig),
    ]:
        cs.store(group=group, name=f"{group}_schema", node=node)


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed Hydra config as a typed ``RunConfig`` (drops the ``hydra`` node)."""
    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("hydra", None)
    merged = OmegaConf.merge(OmegaConf.structured(RunConfig), data)
    run = OmegaConf.to_object(merged)
    validate(run)
    return run


def validate(run: RunConfig) -> None:
    """Cross-field checks Hydra's type system cannot express; messages name the option."""
    if run.batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {run.batch_size}")
    if run.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {run.max_new_tokens}")
    d = run.drafter
    if d.method == "none" and d.num_speculative_tokens != 0:
        raise ValueError("drafter.num_speculative_tokens must be 0 for drafter.method=none")
    if d.method != "none" and d.num_speculative_tokens < 1:
        raise ValueError(f"drafter.num_speculative_tokens must be >= 1 for method {d.method!r}")
    if run.warmup_batches < 0:
        raise ValueError(f"warmup_batches must be >= 0, got {run.warmup_batches}")
