"""Per-iteration draft / verification / acceptance time inside vLLM's own model runner.

A worker extension (``LLM(worker_extension_cls=...)``, vLLM's mechanism for adding methods
to its workers) wraps four methods of the worker's model runner instance (V1 runner; the CPU
runner subclasses it):

  * ``execute_model`` .. ``sample_tokens``: one engine iteration (start = execute_model's start);
  * ``_model_forward``: the target forward over the scheduled tokens = verification of
    B(1+D) tokens when drafting, the plain decode forward otherwise (``t_verify``);
  * ``propose_draft_token_ids``: the drafter (``t_draft``);
  * ``_sample`` + ``_bookkeeping_sync``: rejection sampling and the output bookkeeping (``t_accept``).

Clock reads are preceded by a device synchronisation on CUDA (``torch.cuda.synchronize``), so a
part's time is the time its kernels took; this removes vLLM's CPU/GPU overlap, which is why the
CUDA default runs the timers in a separate pass (see ``vllm.split``). On CPU the sync is a
no-op and the timers run in the measured passes (a few clock reads per iteration).

``t_step`` of an iteration is the period from its ``execute_model`` start to the next one's
(the engine loop: scheduler, IPC, pre/post-processing included); the last iteration of a
``generate`` call uses its own end. ``t_other = t_step - t_draft - t_verify - t_accept``.
The worker returns plain lists (msgpack-serialisable) via ``collective_rpc``.
"""
from __future__ import annotations

from typing import Any

from ..base import StepCounts

EXTENSION = "speedbench.backends.vllm.timers.TimerExtension"
WRAPPED = ("execute_model", "sample_tokens", "_model_forward", "propose_draft_token_ids", "_sample", "_bookkeeping_sync")


class TimerExtension:
    """Mixed into vLLM's worker class; methods are called with ``llm.collective_rpc(name)``."""

    def speedbench_timers_install(self) -> str:
        """"ok", or why the timers cannot be installed (e.g. the V2 model runner has other methods)."""
        runner = self.model_runner
        if getattr(runner, "_speedbench_timers", None) is not None:
            return "ok"
        missing = [m for m in WRAPPED if not callable(getattr(runner, m, None))]
        if missing:
            return f"missing: {type(runner).__name__} has no {', '.join(missing)} (V1 model runner needed: VLLM_USE_V2_MODEL_RUNNER=0)"
        import torch

        from ...engine.clock import own_time  # perf_counter, except in a stepped pass in this process

        state: dict[str, Any] = {"on": False, "sync": False, "rows": [], "cur": None}
        runner._speedbench_timers = state
        cuda = torch.cuda.is_available() and str(getattr(runner, "device", "cpu")).startswith("cuda")

        def clock() -> float:
            if state["sync"] and cuda:
                torch.cuda.synchronize()
            return own_time()

        def timed(part: str, fn):
            def wrapper(*args, **kwargs):
                cur = state["cur"]
                if cur is None:
                    return fn(*args, **kwargs)
                t0 = clock()
                try:
                    return fn(*args, **kwargs)
                finally:
                    cur[part] += clock() - t0
            return wrapper

        execute, sample = runner.execute_model, runner.sample_tokens

        def execute_model(scheduler_output, *args, **kwargs):
            if not state["on"] or scheduler_output.total_num_scheduled_tokens == 0:
                return execute(scheduler_output, *args, **kwargs)
            new = {r.req_id for r in scheduler_output.scheduled_new_reqs}
            spec = scheduler_output.scheduled_spec_decode_tokens or {}
            state["cur"] = cur = {
                "start": clock(), "end": float("nan"), "draft": 0.0, "verify": 0.0, "accept": 0.0,
                "tokens": int(scheduler_output.total_num_scheduled_tokens),
                # req id -> (scheduled tokens, scheduled draft tokens, is its first iteration)
                "reqs": {rid: [int(n), len(spec.get(rid, ())), rid in new]
                         for rid, n in scheduler_output.num_scheduled_tokens.items()},
            }
            out = execute(scheduler_output, *args, **kwargs)
            if out is not None:  # the iteration ended in execute_model (no sampling step)
                cur["end"] = clock()
                state["rows"].append(cur)
                state["cur"] = None
            return out

        def sample_tokens(*args, **kwargs):
            cur = state["cur"]
            try:
                return sample(*args, **kwargs)
            finally:
                if cur is not None:
                    cur["end"] = clock()
                    state["rows"].append(cur)
                    state["cur"] = None

        runner.execute_model, runner.sample_tokens = execute_model, sample_tokens
        runner._model_forward = timed("verify", runner._model_forward)
        runner.propose_draft_token_ids = timed("draft", runner.propose_draft_token_ids)
        runner._sample = timed("accept", runner._sample)
        runner._bookkeeping_sync = timed("accept", runner._bookkeeping_sync)
        return "ok"

    def speedbench_timers_enable(self, on: bool, sync: bool) -> bool:
        """Start (or stop) recording; ``sync``: synchronise the device before every clock read."""
        state = self.model_runner._speedbench_timers
        state["on"], state["sync"], state["rows"], state["cur"] = bool(on), bool(sync), [], None
        return True

    def speedbench_timers_take(self) -> list[dict[str, Any]]:
        state = self.model_runner._speedbench_timers
        rows, state["rows"] = state["rows"], []
        return rows


# ---- host side ---------------------------------------------------------------------------------
def with_periods(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``step`` (seconds from this iteration's start to the next one's; the last uses its end)."""
    for i, r in enumerate(rows):
        nxt = rows[i + 1]["start"] if i + 1 < len(rows) else r["end"]
        r["step"] = max(nxt, r["end"]) - r["start"]
    return rows


def external_id(internal: str, known: set[str]) -> str | None:
    """vLLM's engine-side request id is ``<external>-<8 hex>``; map it back to ``RequestOutput.request_id``."""
    if internal in known:
        return internal
    head = internal.rsplit("-", 1)[0]
    return head if head in known else None


def request_iterations(rows: list[dict[str, Any]], request_ids: list[str]) -> dict[str, list[tuple[int, dict, int]]]:
    """Per request: its decode iterations in order as (iteration index, row, scheduled draft tokens).

    A decode iteration of a request = one where it was scheduled 1 + d tokens (d its drafts) and
    it was not its first (prefill) iteration.
    """
    known = set(request_ids)
    out: dict[str, list] = {rid: [] for rid in request_ids}
    for i, r in enumerate(rows):
        for internal, (n, d, first) in r["reqs"].items():
            rid = external_id(internal, known)
            if rid is None or first or n != 1 + d:
                continue
            out[rid].append((i, r, d))
    return out


def step_counts(iters: list[tuple[int, dict, int]], listed: list[StepCounts] | None, offset: int) -> list[StepCounts] | None:
    """The request's step rows with the iteration's times.

    ``listed``: vLLM's per-request steps (only steps with a proposal, in order), or None (no
    per-request acceptance: rows carry times only). The iterations in which the request was
    scheduled draft tokens are matched one-to-one with ``listed``; iterations without drafts
    become rows with 0 drafted. Returns None when the two do not line up (then nothing is guessed).
    """
    drafted_iters = [x for x in iters if x[2] > 0]
    if listed is not None and len(listed) != len(drafted_iters):
        return None
    out, k = [], 0
    for i, row, d in iters:
        if d > 0 and listed is not None:
            base = listed[k]
            k += 1
            sc = StepCounts(base.drafted, base.accepted, base.emitted)
        else:
            sc = StepCounts(0, 0)
        if _mixed(row):  # another request's prefill shares this forward: not a decode step's time
            sc.t_step = sc.t_draft = sc.t_verify = sc.t_accept = float("nan")
        else:
            sc.t_step, sc.t_draft, sc.t_verify, sc.t_accept = row["step"], row["draft"], row["verify"], row["accept"]
        sc.verify_tokens, sc.iteration, sc.live_batch = row["tokens"], offset + i, len(row["reqs"])
        out.append(sc)
    return out


def _mixed(row: dict[str, Any]) -> bool:
    """An iteration in which some request is prefilled (its first iteration, or a prompt chunk)."""
    return any(first or n != 1 + d for n, d, first in row["reqs"].values())


def split_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean ms of each part over decode-only iterations (no request in its first iteration)."""
    import numpy as np

    dec = [r for r in rows if not _mixed(r)]
    if not dec:
        return {}
    out = {k: float(np.mean([r[k] for r in dec]) * 1e3) for k in ("draft", "verify", "accept", "step")}
    out["other"] = out["step"] - out["draft"] - out["verify"] - out["accept"]
    out["n"] = len(dec)
    return out
