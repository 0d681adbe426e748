"""The engine interface: a backend turns requests into per-request and per-step records.

The runner asks the same backend instance for a baseline run (drafter ``none``) and a
speculative run on the same requests with the same sampling and output length, so the
two are matched. Backends are registered by name with lazy imports: ``backend=torch``
never imports vLLM.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..config import DrafterConfig, RunConfig, SamplingConfig
from ..records import Request, RequestRecord, StepRecord
from ..registry import Registry


@dataclass(frozen=True)
class GenerateSpec:
    drafter: DrafterConfig
    batch_size: int
    sampling: SamplingConfig
    max_new_tokens: int
    ignore_eos: bool
    role: str  # "baseline" | "spec" | "warmup"
    progress: Optional[Callable[[int], None]] = None  # called with the number of requests just finished


@dataclass
class GenerateOutput:
    requests: list[RequestRecord]
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)  # engine-side counters, notes


class Backend(ABC):
    """One engine with one target model loaded; reused by every cell that shares them."""

    name: str = "base"

    def __init__(self, run: RunConfig) -> None:
        self.run = run

    def check(self, drafter: DrafterConfig) -> None:  # noqa: B027 - optional
        """Raise ``ValueError`` naming the option when this engine cannot run ``drafter``."""

    @abstractmethod
    def generate(self, requests: list[Request], spec: GenerateSpec) -> GenerateOutput:
        """Generate for every request in batches of ``spec.batch_size``; failures become records."""

    def info(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:  # noqa: B027
        pass


BACKENDS: Registry[type[Backend]] = Registry("backend")
BACKENDS.register("torch", "speedbench.backends.torch_backend:TorchBackend")
BACKENDS.register("synthetic", "speedbench.backends.synthetic:SyntheticBackend")
BACKENDS.register("vllm", "speedbench.backends.vllm_backend:VllmBackend")
BACKENDS.register("openai", "speedbench.backends.openai_backend:OpenAIBackend")
BACKENDS.register("hf", "speedbench.backends.hf_backend:HFBackend")
