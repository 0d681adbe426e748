"""The offline vLLM backend's settings, resolved once when the backend is built and never changed.

``backend.options`` (``config.engine_options.VllmOptions``, whose ``problems()`` checks every value)
plus what this machine's vLLM decides (CPU or CUDA) give one frozen :class:`VllmSettings`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

CPU_DEFAULTS = {"kv_cache_memory_bytes": 512 << 20, "enforce_eager": True}


@dataclass(frozen=True)
class VllmSettings:
    max_engines: int
    max_num_seqs: int
    spec_metrics: str  # auto | per_request | counters
    batching: str  # static | continuous
    on_cpu: bool
    device: str  # "cpu" or the CUDA build's device type
    # measured (timers in the measured passes) | separate (one extra synced pass) | false
    timers: str
    profile: bool  # one extra profiled batch per call (the split from vLLM's scopes)
    llm_args: Mapping[str, Any]  # defaults | backend.options.engine_args, passed to vllm.LLM
    per_request_ok: bool  # this vLLM has per_request_spec_decode_metrics
    lockstep: bool = False  # engines in this process, passes stepped in turn (``stepped``)
    no_lockstep: str = ""  # why the passes are not stepped ('' when they are)

    @property
    def submits_all(self) -> bool:
        return self.batching == "continuous"


def resolve(engine, progress: bool) -> VllmSettings:
    """``engine`` (a BackendConfig with typed ``VllmOptions``) on the installed vLLM. Raises
    ``ValueError`` with the first problem of the options, or when ``backend.device`` is not the
    device this vLLM runs on."""
    from vllm.platforms import current_platform

    o = engine.options
    problems = o.problems()  # the option values, as the validation pass checked them
    if problems:
        raise ValueError(problems[0])
    on_cpu = bool(current_platform.is_cpu())
    device = "cpu" if on_cpu else str(current_platform.device_type or "cuda")
    want = engine.device
    if want not in ("auto", device) and not (want.startswith("cuda") and device == "cuda"):
        raise ValueError(f"backend.device={want!r} but the installed vLLM runs on {device!r}")
    max_engines = int(o.max_engines)
    # host-side scope times are compute times on CPU only (CUDA kernels run asynchronously)
    timers = str(o.timers).lower()
    # CPU: the sync is a no-op, so the timers run in the measured passes; CUDA: the synced
    # timers remove vLLM's CPU/GPU overlap, so they run in one extra pass per call
    timers = ("measured" if on_cpu else "separate") if timers == "auto" else timers
    profile = str(o.profile_split).lower()
    opts = dict(o.engine_args)
    defaults = dict(CPU_DEFAULTS) if on_cpu else {"gpu_memory_utilization": round(0.85 / max_engines, 3)}
    # the warm-up runs the same prompts first: with prefix caching the measured TTFT would be a cache hit
    defaults["enable_prefix_caching"] = False
    defaults["use_tqdm_on_load"] = progress  # the weight-loading bar only on a terminal
    if "gpu_memory_utilization" in opts or "kv_cache_memory_bytes" in opts:
        defaults.pop("kv_cache_memory_bytes", None)
        defaults.pop("gpu_memory_utilization", None)
    return VllmSettings(
        max_engines=max_engines, max_num_seqs=int(o.max_num_seqs), spec_metrics=str(o.spec_metrics),
        batching=str(o.batching), on_cpu=on_cpu, device=device, timers=timers,
        profile=profile == "true" or (profile == "auto" and on_cpu and timers == "false"),
        llm_args=MappingProxyType(defaults | opts), per_request_ok=_engine_args_have("per_request_spec_decode_metrics"),
        **_lockstep(str(o.lockstep).lower(), on_cpu, o.parallel_workers()),
    )


def why_not_stepped(engine) -> str:
    """Why this engine's passes are not stepped in this process ('' when they are; ``backend.options.lockstep``)."""
    from .spec import on_cpu

    o = engine.options
    return _lockstep(str(o.lockstep).lower(), on_cpu(), o.parallel_workers())["no_lockstep"]


def _lockstep(option: str, on_cpu: bool, workers: int) -> dict[str, Any]:
    """``lockstep`` and, when off, why (recorded in each cell's ``extra.protocol``)."""
    if option == "false":
        why = "backend.options.lockstep=false"
    elif workers > 1:
        why = f"{workers} workers (tensor/pipeline parallel) need worker processes; the engine cannot step in this process"
    elif option == "auto" and not on_cpu:
        why = "lockstep=auto is on for vLLM's CPU build only: not yet measured on CUDA (backend.options.lockstep=true tries it)"
    else:
        return {"lockstep": True, "no_lockstep": ""}
    return {"lockstep": False, "no_lockstep": why}


def _engine_args_have(name: str) -> bool:
    try:
        from vllm.engine.arg_utils import EngineArgs

        return name in {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:  # pragma: no cover - very old vLLM
        return False
