"""The draft / verify / accept split of a vLLM pass and where it came from (``extra`` of the pass).

The timers inside vLLM's model runner (``timers``, a worker extension) give per-iteration times,
folded onto each request's step rows (:class:`PassTimes`): in the measured passes on CPU, in one
extra device-synced replay batch per pass on CUDA (``backend.options.timers``);
``extra["timing_source"]`` names it and ``extra["timed_split"]`` keeps the per-part means, the
span error and (CUDA) the timers' overhead. With ``profile_split`` one extra, profiled batch per
call also reads the split from vLLM's model-runner scopes into ``extra["profiled_split"]``
(see ``profile``). A speculative pass also carries the baseline's verification time at the same
batch size, from the baseline pass before it (:class:`BaselineSplits`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...drafters.registry import is_baseline
from ..base import NAN, GenerateSpec, TurnResult, cut_to_output
from . import profile as vllm_profile
from . import timers as vllm_timers

log = logging.getLogger(__name__)
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


@dataclass
class BaselineSplits:
    """The baseline passes' split per batch size (the latest), read by the speculative passes after them."""

    profiled: dict[int, dict] = field(default_factory=dict)  # profiled pass: {"verify": {...}, ...}
    timed: dict[int, dict] = field(default_factory=dict)  # separate synced pass: split_ms


@dataclass
class PassTimes:
    """One pass's timer rows and how well they lined up with vLLM's own per-request steps and spans."""

    mode: str  # measured | separate (the engine's timers)
    speculative: bool
    rows: list[dict] = field(default_factory=list)
    span_ratios: list[float] = field(default_factory=list)  # per request: sum of timed periods / vLLM's decode span
    unmatched: int = 0  # requests whose timed iterations did not line up with vLLM's per-request steps

    def attach(self, rows: list[dict], request_ids: list[str], results: list[TurnResult]) -> None:
        """Give every request its decode iterations' times as step rows (see ``timers``)."""
        rows = vllm_timers.with_periods(rows)
        if self.mode == "separate":  # unsynced host times of the parts mean nothing on CUDA
            for r in rows:
                r["draft"] = r["verify"] = r["accept"] = NAN
        self.rows += rows
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
            # every decode iteration is a row now, so the output's length says what the last one kept
            cut_to_output(steps, len(result.output_ids), lead=1)
            if len(result.output_ids) > 1 and result.decode_s > 0 and iters:
                # vLLM's own first->last token span against the sum of the iterations timed here
                # every decode iteration counts here, those shared with a prefill included
                self.span_ratios.append(sum(row["step"] for _, row, _ in iters) / result.decode_s)


def timing_extra(extra: dict[str, Any], times: PassTimes, engine, settings, baselines: BaselineSplits,
                 spec: GenerateSpec, replay: list[list[int]], params, requests) -> None:
    """Which timers gave the split, its summary (ms) and its error against vLLM's own timestamps;
    in separate mode after one synced replay of ``replay`` (the pass's first turns)."""
    import numpy as np

    measured = vllm_timers.split_summary(times.rows)
    info: dict[str, Any] = {
        "mode": times.mode, "device": settings.device, "decode_iterations": measured.get("n", 0),
        "unmatched_requests": times.unmatched,
        # (sum of the timed iteration periods) / (vLLM's last_token_ts - first_token_ts) - 1, median over requests
        "span_error": float(np.median(times.span_ratios) - 1) if times.span_ratios else NAN,
    }
    if times.mode == "measured":
        info["split_ms"] = measured
        extra["timing_source"] = f"vllm-runner-timers:measured-pass{':cuda-synced' if not settings.on_cpu else ''}"
        extra["timing_split"] = TIMERS_MEASURED
    elif spec.extras and replay and requests:
        from vllm.inputs import TokensPrompt

        llm = engine.llm
        llm.collective_rpc("speedbench_timers_enable", args=(True, True))
        llm.generate([TokensPrompt(prompt_token_ids=p) for p in replay], params, use_tqdm=False)
        rows = vllm_timers.with_periods(llm.collective_rpc("speedbench_timers_take")[0])
        llm.collective_rpc("speedbench_timers_enable", args=(False, False))
        timed = vllm_timers.split_summary(rows)
        info["split_ms"] = timed
        # how much the synced timers slow an iteration: timed pass step / measured pass step - 1
        info["overhead"] = timed["step"] / measured["step"] - 1 if timed and measured.get("step") else NAN
        if not times.speculative:
            baselines.timed[spec.batch_size] = timed
        elif "verify" in baselines.timed.get(spec.batch_size, {}):
            info["verify_baseline_ms"] = baselines.timed[spec.batch_size]["verify"]
        extra["timing_source"] = "vllm-runner-timers:separate-synced-pass"
        extra["timing_split"] = TIMERS_SEPARATE
    else:
        extra["timing_source"] = "missing: separate timed pass not run for this pass"
    extra["timed_split"] = info


def profiled_extra(extra: dict[str, Any], engine, trace_dir: str, baselines: BaselineSplits,
                   spec: GenerateSpec, first_turns: list[list[int]], params) -> None:
    """One extra batch (first turns) under the profiler: draft and forward scope times."""
    from vllm.inputs import TokensPrompt

    llm = engine.llm
    prompts = [TokensPrompt(prompt_token_ids=p) for p in first_turns]
    try:
        split = vllm_profile.profile_split(llm, lambda: llm.generate(prompts, params, use_tqdm=False), trace_dir)
    except Exception as exc:  # the measurement stands; only the split is missing
        log.warning("vllm: profiled pass failed: %s", exc)
        split = {"status": f"missing: profiled pass failed: {type(exc).__name__}: {exc}"}
    if is_baseline(spec.drafter.method):
        baselines.profiled[spec.batch_size] = split
        extra["profiled_split"] = split
    else:
        base = baselines.profiled.get(spec.batch_size, {})
        extra["profiled_split"] = split | ({"verify_baseline": base["verify"]} if "verify" in base else {})
    extra["timing_split"] = PROFILED if split.get("status") == "measured" else split["status"]
