"""Drafter methods an engine build accepts in its configuration but cannot run: refused up front.

Each row names the engine, the method and the reason, read from that engine's own source or
seen when it ran. The validation pass and the engine's own check both read this table, so a
refused method stops the run before any model loads (one line, exit 2) instead of failing at
engine start or at the first generate. Synthetic acceptance on vLLM's CPU build is refused by
``backends.vllm.spec.check_synthetic`` (it is a rejection-sampler setting, not a method).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineRefusal:
    backend: str
    method: str
    reason: str
    cpu_only: bool = False  # refused only where the engine runs on CPU
    unless_module: str | None = None  # runs once this Python module is importable


ENGINE_REFUSALS: tuple[EngineRefusal, ...] = (
    EngineRefusal("vllm", "dspark", "vLLM's CPU build runs only the V1 model runner, which does not support dspark "
                  "('Model Runner V1 does not support: dspark speculative decoding')", cpu_only=True),
    EngineRefusal("vllm", "mlp_speculator", "this vLLM has no V1 proposer for mlp_speculator and its V2 model "
                  "runner refuses it (the engine fails at start-up)"),
    EngineRefusal("vllm", "suffix", "vLLM's suffix decoding needs the arctic-inference package, which is not "
                  "installed (published as a source distribution only; see the README)",
                  unless_module="arctic_inference"),
)


# backends that run another's engine build (its refusals apply to them too)
SAME_BUILD = {"vllm_serve": "vllm"}


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def engine_refusal(backend: str, method: str, on_cpu=None) -> str | None:
    """The one-line refusal of ``method`` on ``backend``, or None when nothing in the table refuses it.

    ``on_cpu``: whether the engine runs on CPU (True/False), or a callable asked only when a
    CPU-only row matches.
    """
    for row in ENGINE_REFUSALS:
        if row.backend != SAME_BUILD.get(backend, backend) or row.method != method:
            continue
        if row.unless_module and _importable(row.unless_module):
            continue
        if row.cpu_only and not (on_cpu() if callable(on_cpu) else on_cpu):
            continue
        return f"drafter.method={method!r} cannot run on backend={backend}: {row.reason}"
    return None
