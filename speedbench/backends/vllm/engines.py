"""Engine construction: one ``vllm.LLM`` per (speculative config, ``max_num_seqs``), kept in a small LRU.

The baseline is the engine with ``speculative_config=None``. At most ``max_engines`` are alive at
once *in the process*, whichever backend started them (a sweep over the target keeps the earlier
job's backend cached, and on a GPU each engine takes ``gpu_memory_utilization / max_engines``): a
pool about to start one closes the least recently used engine of any pool until one more fits its
own ``max_engines``. An engine an open session still holds (a pass under way, or its lockstep
partner) is never closed to make room; if every engine is held, the new one starts anyway, with a
warning. Starting an evicted engine again costs a full engine start-up (~40 s for the tiny models
on 2 CPU cores). Each :class:`Engine` records whether its model-runner timers were installed.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import logging
import shutil
import tempfile
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import spec_counters
from . import profile as vllm_profile
from . import stepped
from . import timers as vllm_timers
from .settings import VllmSettings
from .spec import speculative_config, vllm_version

log = logging.getLogger(__name__)
# the newest engine in this process: vLLM's Prometheus registry is process-wide and every new
# engine re-registers it, so only the newest engine's counters can be read (by any backend)
_registry_owner: list[int | None] = [None]
_in_process: set[int] = set()  # ids of the live engines whose engine core runs in this process
_POOLS: "weakref.WeakSet[EnginePool]" = weakref.WeakSet()  # this process's open pools: max_engines counts them all
_HOLDERS: weakref.WeakSet = weakref.WeakSet()  # open sessions (``.eng``): their engines are not closed to make room
_USE = itertools.count()  # the process-wide order of use (least recently used closes first)
ENGINE_SHUTDOWN_S = 60.0  # vLLM's default (5 s) force-kills a busy engine process: warnings, leaked shared memory


@dataclass(frozen=True)
class Engine:
    """One started engine: the ``vllm.LLM``, its LRU key and the timers mode it really runs."""

    llm: Any
    key: str
    timers: str  # the settings' mode, or "false" when this engine's timers could not be installed
    timers_missing: str = ""  # why not (the timing_source of its passes), else ""


class EnginePool:
    """The engines of one backend (one target model), newest last."""

    def __init__(self, settings: VllmSettings, target, model_dir: str, seed: int, threads: int | None = None) -> None:
        self.settings, self.target, self.model_dir, self.seed = settings, target, model_dir, seed
        self.threads = threads  # stepped passes on a CPU: the forwards' compute threads in this process
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._used: dict[str, int] = {}  # key -> when it was last handed out (``_USE``)
        self.starts: list[dict[str, Any]] = []
        self.trace_root = tempfile.mkdtemp(prefix="speedbench-vllm-trace-") if settings.profile else None

    def get(self, drafter, seqs: int, log_dir: str | None = None) -> Engine:
        """The engine for ``drafter`` with ``max_num_seqs=seqs``, started (and an old one closed) if needed."""
        s = self.settings
        spec_cfg = speculative_config(drafter)
        key = json.dumps({"spec": spec_cfg, "max_num_seqs": seqs}, sort_keys=True, default=str)
        if key in self._engines:
            self._used[key] = next(_USE)
            return self._engines[key]
        _make_room(s.max_engines)
        from vllm import LLM

        if s.lockstep:  # the engine core in this process (LLMEngine.step() = one iteration); set before it starts
            stepped.enter_process(self.threads)
        t = self.target
        kwargs = dict(
            model=self.model_dir, tokenizer=self.model_dir, dtype=t.dtype, revision=t.revision,
            trust_remote_code=t.trust_remote_code, seed=self.seed, max_num_seqs=seqs,
            disable_log_stats=False,  # else no RequestOutput.metrics and no counters at all
        ) | s.llm_args
        if s.profile:
            kwargs["profiler_config"] = vllm_profile.profiler_config(self.trace_dir(key))
        if spec_cfg is not None:
            kwargs["speculative_config"] = spec_cfg
            if s.spec_metrics != "counters" and s.per_request_ok:
                kwargs.setdefault("per_request_spec_decode_metrics", "detailed")
            elif s.spec_metrics == "per_request":
                raise ValueError(f"vLLM {vllm_version()} has no per_request_spec_decode_metrics; use spec_metrics=counters")
        if s.timers != "false":
            kwargs.setdefault("worker_extension_cls", vllm_timers.EXTENSION)
        t0 = time.perf_counter()
        from ...console import engine_log, stdout_fd_to

        sink = engine_log(Path(log_dir), "vllm") if log_dir else None
        if sink is not None:
            log.info("vllm: engine output in %s", sink)
        starting = stepped.engine_start_in_process() if s.lockstep else contextlib.nullcontext()
        fds = (1, 2) if s.lockstep else (1,)  # in this process: its native start-up notes (NUMA binding) too
        with stdout_fd_to(sink, fds), starting:  # the engine process inherits it: profiler tables, per-step logs
            llm = LLM(**kwargs)
        engine = Engine(llm, key, s.timers)
        if s.timers != "false":
            status = llm.collective_rpc("speedbench_timers_install")[0]
            if status != "ok":  # the split is then missing, with the reason; the measurement stands
                log.warning("vllm: %s", status)
                engine = Engine(llm, key, "false", status)
        self.starts.append({"speculative_config": spec_cfg, "seconds": time.perf_counter() - t0})
        self._engines[key] = engine
        self._used[key] = next(_USE)
        _POOLS.add(self)
        if s.lockstep:
            _in_process.add(id(llm))
        _registry_owner[0] = id(llm)
        return engine

    def counters(self, engine: Engine):
        """The engine's cumulative spec-decode counters, or None where they cannot be read."""
        if id(engine.llm) != _registry_owner[0]:  # a newer engine re-registered the process-wide Prometheus metrics
            return None
        try:
            return spec_counters.from_vllm_metrics(engine.llm.get_metrics())
        except AssertionError:  # disable_log_stats=True
            return None

    def trace_dir(self, key: str) -> str:
        path = Path(self.trace_root) / hashlib.sha256(key.encode()).hexdigest()[:12]
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def close_engine(self, key: str) -> None:
        """Shut one engine down and forget it (its key starts a fresh engine next time)."""
        self._used.pop(key, None)
        _shutdown(self._engines.pop(key).llm)

    def close(self) -> None:
        while self._engines:
            self.close_engine(next(reversed(self._engines)))
        _POOLS.discard(self)
        if self.trace_root:
            shutil.rmtree(self.trace_root, ignore_errors=True)


def hold(session) -> None:
    """``session`` uses ``session.eng`` until :func:`release` (or until it is garbage): not closed to make room."""
    _HOLDERS.add(session)


def release(session) -> None:
    _HOLDERS.discard(session)


def alive() -> int:
    """Engines alive in this process, over every pool."""
    return sum(len(pool._engines) for pool in list(_POOLS))


def _make_room(limit: int) -> None:
    """Close the least recently used engine of any pool, one a session holds excepted, until one more
    fits in ``limit`` (the starting pool's ``max_engines``)."""
    while alive() >= limit:
        held = {id(h.eng.llm) for h in list(_HOLDERS)}
        idle = [(pool._used.get(k, -1), id(pool), pool, k) for pool in list(_POOLS)
                for k, e in pool._engines.items() if id(e.llm) not in held]
        if not idle:
            log.warning("vllm: %d engines alive in this process, every one in use by a pass: starting one more "
                        "than backend.options.max_engines=%d", alive(), limit)
            return
        _, _, pool, k = min(idle, key=lambda c: c[:2])
        log.info("vllm: closing engine %s to make room (max_engines=%d in this process)", k, limit)
        pool.close_engine(k)


def _shutdown(llm) -> None:
    """Stop an engine's worker processes now rather than at garbage collection, giving them the
    time to exit by themselves.

    An engine core in this process (lockstep) tears down vLLM's process-wide distributed state
    when it shuts down (``cleanup_dist_env_and_memory``): every other engine in this process
    then fails its next step ("pipeline model parallel group is not initialized"). While others
    are alive (of any backend in this process), that teardown is skipped; the last one does it."""
    others = _in_process - {id(llm)}
    _in_process.discard(id(llm))
    keep_dist = _keep_distributed_state() if others else contextlib.nullcontext()
    try:
        with keep_dist:
            try:
                llm.llm_engine.engine_core.shutdown(timeout=ENGINE_SHUTDOWN_S)
            except TypeError:  # a vLLM whose shutdown takes no timeout
                llm.llm_engine.engine_core.shutdown()
    except Exception:  # pragma: no cover - best effort
        log.debug("vllm: engine shutdown raised", exc_info=True)
    del llm
    gc.collect()


@contextlib.contextmanager
def _keep_distributed_state():
    import vllm.v1.engine.core as core

    teardown = getattr(core, "cleanup_dist_env_and_memory", None)
    core.cleanup_dist_env_and_memory = lambda *a, **k: gc.collect()
    try:
        yield
    finally:
        if teardown is not None:
            core.cleanup_dist_env_and_memory = teardown
