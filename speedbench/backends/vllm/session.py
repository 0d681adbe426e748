"""One measured pass on an offline vLLM engine: static batches of B (one ``LLM.generate`` per batch
and turn) or, with ``batching=continuous``, every request of the pass in one ``LLM.generate`` per
turn, the engine batching up to ``max_num_seqs`` itself. Every piece of state here lives for one pass.
"""
from __future__ import annotations

from typing import Any

from ...drafters.registry import is_baseline
from ..base import GenerateSpec, Session, TurnInput, TurnResult, TurnStepper
from . import engines
from .outputs import describe, put_counters_on_first, turn_result
from .spec import speculative_config, vllm_version
from .stepped import Stepper, run_stepped
from .split import TIMING_SPLIT, PassTimes, profiled_extra, timing_extra


def sampling_params(spec: GenerateSpec):
    from vllm import SamplingParams

    s = spec.sampling
    return SamplingParams(
        temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, seed=s.seed,
        max_tokens=spec.max_new_tokens, ignore_eos=spec.ignore_eos, detokenize=False,
    )


class VllmSession(Session):
    """One pass on the engine for the spec's speculative config; one ``LLM.generate`` per batch and turn."""

    def __init__(self, backend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        self.eng = backend.engines.get(spec.drafter, backend.engine_seqs(spec.batch_size), spec.log_dir)
        engines.hold(self)  # until finish: no other pool closes this engine to make room
        self.params = sampling_params(spec)
        self.speculative = not is_baseline(spec.drafter.method)
        self.total = None
        self.sources: set[str] = set()
        self.first_prompts: list[list[int]] = []  # the profiled pass replays up to B first turns
        self.times = PassTimes(self.eng.timers, self.speculative)

    def group_size(self, n_requests: int) -> int:
        return n_requests if self.backend.submits_all else self.spec.batch_size

    def run_turns(self, turns: list[TurnInput]) -> list[TurnResult]:
        from vllm.inputs import TokensPrompt

        llm = self.eng.llm
        before, timed = self.open_call()
        if self.backend.settings.lockstep:  # one engine step at a time, times on the pass's own clock
            done = run_stepped(llm, [t.prompt for t in turns], self.params)
            outs = [d.output for d in done]
            results = [stepped_result(t.prompt, d, self.speculative) for t, d in zip(turns, done)]
        else:
            outs = llm.generate([TokensPrompt(prompt_token_ids=t.prompt) for t in turns], self.params, use_tqdm=False)
            results = [turn_result(t.prompt, o, self.speculative) for t, o in zip(turns, outs)]
        self.close_call(before, timed, [o.request_id for o in outs], results)
        return results

    def open_call(self):
        """Before one engine call (a batch's turn, or a whole in-process load point): the counters, and the
        timers on for a measured pass. Returns (counters before, timed)."""
        pool, mode = self.backend.engines, self.eng.timers
        before = pool.counters(self.eng) if self.speculative else None
        timed = mode != "false" and self.spec.role != "warmup"
        if timed:  # separate mode: periods only here (no sync); the parts come from the extra pass
            self.eng.llm.collective_rpc("speedbench_timers_enable",
                                        args=(True, mode == "measured" and not self.backend.settings.on_cpu))
        return before, timed

    def close_call(self, before, timed: bool, request_ids: list[str], results: list[TurnResult]) -> None:
        """After the call: the timers' rows on each request's steps, the counter delta pooled into the pass."""
        rows = self.eng.llm.collective_rpc("speedbench_timers_take")[0] if timed else None
        if rows is not None:
            self.times.attach(rows, request_ids, results)
        after = self.backend.engines.counters(self.eng) if self.speculative else None
        delta = after - before if before is not None and after is not None else None
        if delta is not None:
            self.total = delta if self.total is None else self.total + delta
        if self.speculative and any(r.steps is None for r in results):
            put_counters_on_first([results], delta)
        self.sources |= {r.al_source for r in results}

    def stepper(self) -> TurnStepper | None:
        """In-process load points: this pass's engine stepped by the load driver (stepped engines only)."""
        return _VllmTurnStepper(self) if self.backend.settings.lockstep else None

    def finish(self, records, steps) -> dict[str, Any]:
        try:
            return self._finish(records)
        finally:
            engines.release(self)

    def _finish(self, records) -> dict[str, Any]:
        b, spec, eng = self.backend, self.spec, self.eng
        extra: dict[str, Any] = {"engine": "vllm", "vllm": vllm_version(), "timing_split": TIMING_SPLIT,
                                 "timing_source": eng.timers_missing or "missing: backend.options.timers=false"}
        requests = [r for r in records if r.status == "ok"]
        if eng.timers != "false" and spec.role != "warmup":
            timing_extra(extra, self.times, eng, b.settings, b.baselines, spec, self.first_prompts, self.params, requests)
        if b.settings.profile and spec.extras and spec.role != "warmup" and requests and self.first_prompts:
            profiled_extra(extra, eng, b.engines.trace_dir(eng.key), b.baselines, spec, self.first_prompts, self.params)
        if self.speculative:
            extra["speculative_config"] = speculative_config(spec.drafter)
            if extra["speculative_config"].get("rejection_sample_method") == "synthetic":
                cfg = extra["speculative_config"]
                al = cfg.get("synthetic_acceptance_length")
                if al is None and cfg.get("synthetic_acceptance_rates"):  # unconditional rates
                    al = 1.0 + sum(cfg["synthetic_acceptance_rates"])
                extra["synthetic_al"] = al
            extra["al_detail"] = describe(self.sources)
            extra["counters"] = self.total.as_dict() if self.total is not None else "unavailable"
        return extra

    def render(self, history, user):
        prompt = super().render(history, user)
        if not history and len(self.first_prompts) < self.spec.batch_size:
            self.first_prompts.append(prompt)
        return prompt


def stepped_result(prompt: list[int], done, speculative: bool) -> TurnResult:
    """A stepped request as a turn result: its own-clock times and the chunks a client would have seen."""
    result = turn_result(prompt, done.output, speculative, (done.ttft, done.decode_s))
    result.t_send = done.t_send
    result.chunks, result.chunk_gaps = list(done.chunks), list(done.chunk_gaps)
    return result


class _VllmTurnStepper(TurnStepper):
    """A pass's engine under the in-process load driver: turns added and finished at step boundaries;
    the timers and counters of the whole pass are attached when it closes (as one ``run_turns`` call)."""

    def __init__(self, session: VllmSession) -> None:
        self.s = session
        self.before, self.timed = session.open_call()
        self.stepper = Stepper(session.eng.llm, session.params)
        self.stepper.clock.begin()
        self.prompts: dict[str, list[int]] = {}
        self.done: list[tuple[str, TurnResult]] = []

    def now(self) -> float:
        return self.stepper.now()

    def idle_until(self, t: float) -> None:
        self.stepper.idle_until(t)

    def add(self, turn: TurnInput, t_send: float) -> str:
        rid = self.stepper.add(turn.prompt, t_send)
        self.prompts[rid] = turn.prompt
        return rid

    def busy(self) -> bool:
        return self.stepper.busy()

    def step(self) -> list[tuple[str, TurnResult]]:
        out = [(rid, stepped_result(self.prompts.pop(rid), d, self.s.speculative)) for rid, d in self.stepper.step().items()]
        self.done += out
        return out

    def in_flight_tokens(self) -> int:
        return sum(t.made for t in self.stepper.tracks.values())

    def checkpoint(self, progress: float) -> None:
        self.stepper.clock.checkpoint(progress)

    def close(self) -> None:
        self.s.wall_s = self.stepper.now()  # the pass's window, idle time between arrivals included
        self.s.close_call(self.before, self.timed, [rid for rid, _ in self.done], [r for _, r in self.done])
