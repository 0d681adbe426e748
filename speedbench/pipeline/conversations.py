"""The one conversation loop: requests -> turns on a backend -> request and step records.

Every backend goes through :func:`generate`. A request's user turns are sent one after
another; the engine's own reply to turn i is appended as the assistant message before
turn i+1 (SPEED-Bench's multi-turn rule, written once in :func:`_conversations`). Static-batch
engines get B conversations at a time and one ``run_turns`` call per turn; per-request servers
run every conversation as its own task, at most B in flight; both drivers only carry the
engine's results to that one loop. A failing batch or request is recorded ``status=failed`` with its
error; the pass goes on.

:func:`fold_turns` is the only place a ``RequestRecord`` is built, with these conventions:

* TTFT is the first turn's; TPOT = decode time / (tokens - 1), summed over turns;
* a *draft* is a step with at least one proposed token; ``accepted`` counts leading draft
  tokens accepted before any truncation at ``max_new_tokens``; the histogram is over drafts;
* ``kept`` is what the output kept of a step (a stop token or ``max_new_tokens`` cut the rest);
  an engine that does not say keeps ``kept = emitted``; the record's ``kept``/``accepted_kept``
  sum it over drafting steps (-1 when acceptance came from pooled counters);
* a step's ``position`` is where its first token lands in the turn's reply: the turn's
  ``lead_tokens`` (the prefill's token) plus the kept tokens of the steps before it;
* the record carries the stream as a client sees it (``chunks`` per turn, ``turn_finish``) for
  the SPEED-Bench tool's AL (``metrics.al_speed_bench``);
* a time an engine does not expose is NaN, never an estimate;
* every step row carries ``iteration``: the id of its target forward within the pass, shared
  by the rows of one batch, so per-iteration times are counted once.
"""
from __future__ import annotations

import asyncio
import math
from typing import Iterator

from ..arrivals import arrival_times
from ..engine.clock import own_time
from ..backends.base import Backend, GenerateOutput, GenerateSpec, Session, TurnInput, TurnResult, TurnStepper
from .load import stepped_point
from ..records import STATUS_FAILED, STATUS_OK, Request, RequestRecord, StepRecord

NAN = float("nan")


def generate(backend: Backend, requests: list[Request], spec: GenerateSpec) -> GenerateOutput:
    """One measured pass of ``requests`` on ``backend`` (baseline, speculative or warm-up)."""
    backend.ready(spec.drafter, spec.batch_size)
    session = backend.session(spec)
    ids = _Iterations()
    t0 = own_time()  # the pass's own clock (a lockstep partner's turns are not this pass's time)
    stepper = session.stepper() if stepped_point(backend, spec.load) else None
    if backend.asynchronous:
        results = asyncio.run(_run_async(session, requests, spec, ids))
    elif stepper is not None:
        results = _run_load(session, stepper, requests, spec, ids)
    else:
        results = _run_batches(session, requests, spec, ids)
    wall = own_time() - t0
    records: list[RequestRecord] = []
    steps: list[StepRecord] = []
    for req, batch_index, turns, error in results:
        if error is not None:
            records.append(record(req, spec.role, [], error=error, repeat=spec.repeat))
            continue
        rec, rows = fold_turns(req, spec.role, turns, batch_index, spec.repeat)
        records.append(rec)
        steps += rows
    records = _relative_starts(records)
    extra = session.finish(records, steps)
    return GenerateOutput(records, steps, session.wall_s if session.wall_s is not None else wall, extra)


def _relative_starts(records: list[RequestRecord]) -> list[RequestRecord]:
    """Send times as seconds from the pass's first send (records carry the absolute clock until here)."""
    import math
    from dataclasses import replace

    starts = [r.t_start for r in records if math.isfinite(r.t_start)]
    if not starts:
        return records
    t0 = min(starts)
    return [replace(r, t_start=r.t_start - t0) if math.isfinite(r.t_start) else r for r in records]


def batches(requests: list[Request], size: int) -> Iterator[list[Request]]:
    for start in range(0, len(requests), size):
        yield requests[start : start + size]


class _Iterations:
    """Gives each backend call's local iteration ids a range of its own within the pass."""

    def __init__(self) -> None:
        self.next = 0

    def assign(self, results: list[TurnResult]) -> None:
        rows = [s for r in results for s in (r.steps or ())]
        nxt = self.next + 1 + max((s.iteration for s in rows if s.iteration >= 0), default=-1)
        for s in rows:
            if s.iteration >= 0:  # the engine's own ids: rows of one forward share one
                s.iteration += self.next
            else:  # an engine that reports no sharing: every step is its own iteration
                s.iteration, nxt = nxt, nxt + 1
        self.next = nxt


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


Outcome = tuple  # (request, batch index, its turns' results, error or None)


def _conversations(session: Session, group: list[Request], ids: _Iterations):
    """The multi-turn rule, once, for a group of conversations run together (a static batch, or
    one request on a server): yields each turn's inputs for the conversations that have that
    turn, is sent the engine's results, appends each reply to its conversation before the next
    turn is rendered, and returns every conversation's turn results."""
    history: list[list[tuple[str, TurnResult]]] = [[] for _ in group]
    for turn in range(max(len(r.turns) for r in group)):
        rows = [b for b, r in enumerate(group) if len(r.turns) > turn]
        inputs = [TurnInput(group[b], turn, _prompt(session, group[b], turn, history[b]), tuple(history[b]))
                  for b in rows]
        results = yield inputs
        if len(results) != len(inputs):
            raise RuntimeError(f"the engine returned {len(results)} results for {len(inputs)} prompts")
        ids.assign(results)
        for b, res in zip(rows, results):
            history[b].append((group[b].turns[turn], res))
    return [[res for _, res in h] for h in history]


def _prompt(session: Session, req: Request, turn: int, history):
    """The engine's prompt of a turn: the request's own token ids for its first turn when it has them
    (dataset=random: no chat template), else the rendered conversation."""
    if turn == 0 and req.prompt_ids:
        return list(req.prompt_ids)
    return session.render(history, req.turns[turn])


def _outcomes(group: list[Request], turns: list | None = None, exc: BaseException | None = None) -> list[Outcome]:
    """What a group of conversations came to: each one's turns, or the group's failure (data, not an exception)."""
    if exc is not None:
        return [(r, b, [], _error(exc)) for b, r in enumerate(group)]
    return [(r, b, t, None) for b, (r, t) in enumerate(zip(group, turns))]


def _run_batches(session: Session, requests: list[Request], spec: GenerateSpec, ids: _Iterations) -> list[Outcome]:
    """Static batches of B conversations, one ``run_turns`` call per turn; a failed batch is data."""
    out: list[Outcome] = []
    for batch in batches(requests, max(1, session.group_size(len(requests)))):
        conv = _conversations(session, batch, ids)
        try:
            inputs = next(conv)
            while True:
                inputs = conv.send(session.run_turns(inputs))
        except StopIteration as done:
            out += _outcomes(batch, done.value)
        except Exception as exc:  # noqa: BLE001 - the pass goes on
            out += _outcomes(batch, exc=exc)
        finally:
            if spec.progress:
                spec.progress(len(batch))
    return out


async def _run_async(session: Session, requests: list[Request], spec: GenerateSpec, ids: _Iterations) -> list[Outcome]:
    """Every conversation its own task, at most B in flight; a failed request is data."""
    await session.start()
    try:
        sem = asyncio.Semaphore(spec.batch_size)

        async def one(index: int, req: Request) -> Outcome:
            await session.arrive(index)
            async with sem:
                conv = _conversations(session, [req], ids)
                try:
                    inputs = next(conv)
                    while True:
                        inputs = conv.send([await session.run_turn_async(inputs[0])])
                except StopIteration as done:
                    return _outcomes([req], done.value)[0]
                except Exception as exc:  # noqa: BLE001
                    return _outcomes([req], exc=exc)[0]
                finally:
                    if spec.progress:
                        spec.progress(1)

        return await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    finally:
        await session.stop()


def in_flight_cap(load, n_requests: int, batch_size: int) -> int:
    """Requests in flight at most in a load point: ``load.concurrency``; else all of them in open loop
    (arrivals decide), ``batch_size`` in closed loop."""
    if load.concurrency is not None:
        return int(load.concurrency)
    return n_requests if math.isfinite(load.request_rate) else int(batch_size)


def _run_load(session: Session, stepper: TurnStepper, requests: list[Request], spec: GenerateSpec,
              ids: _Iterations) -> list[Outcome]:
    """An in-process load point on an engine the caller steps (``Session.stepper``), as a server's client
    would drive it: request i arrives at its seeded arrival time (``arrivals``, the same sequence as the
    OpenAI client's; all at 0 in closed loop) on the pass's own clock and is sent once fewer than the cap
    are in flight (``in_flight_cap``), at max(arrival, the step boundary its slot freed at); a
    conversation's next turn is sent when its previous one finishes. An idle engine's clock moves on to
    the next arrival. A failed turn fails its request; a failed step fails every request not finished."""
    ld = spec.load
    n = len(requests)
    arrivals = arrival_times(n, float(ld.request_rate), float(ld.burstiness), spec.sampling.seed)
    cap = max(1, in_flight_cap(ld, n, spec.batch_size))
    budget = max(1, sum(len(r.turns) for r in requests) * spec.max_new_tokens)
    outcomes: list[Outcome | None] = [None] * n
    live: dict = {}  # stepper key -> (request index, its conversation)
    nxt, freed_at, made = 0, 0.0, 0

    def send(i: int, conv, inputs: list[TurnInput], t_send: float) -> None:
        live[stepper.add(inputs[0], t_send)] = (i, conv)

    def end(i: int, outcome: Outcome) -> None:
        nonlocal freed_at
        outcomes[i], freed_at = outcome, stepper.now()
        if spec.progress:
            spec.progress(1)

    try:
        while nxt < n or live:
            while nxt < n and len(live) < cap and arrivals[nxt] <= stepper.now():
                conv = _conversations(session, [requests[nxt]], ids)
                try:
                    send(nxt, conv, next(conv), max(arrivals[nxt], freed_at))
                except Exception as exc:  # noqa: BLE001 - e.g. a prompt the engine refuses: this request fails
                    end(nxt, _outcomes([requests[nxt]], exc=exc)[0])
                nxt += 1
            if not live:
                stepper.idle_until(arrivals[nxt])  # nothing to run: the clock moves on to the next arrival
                continue
            for key, result in stepper.step():
                i, conv = live.pop(key)
                made += len(result.output_ids)
                try:
                    send(i, conv, conv.send([result]), stepper.now())
                except StopIteration as done:
                    end(i, _outcomes([requests[i]], done.value)[0])
                except Exception as exc:  # noqa: BLE001 - this request fails; the point goes on
                    end(i, _outcomes([requests[i]], exc=exc)[0])
            stepper.checkpoint((made + stepper.in_flight_tokens()) / budget)  # the one behind in output steps next
    except Exception as exc:  # noqa: BLE001 - the engine failed: every request not finished fails as data
        for i in range(n):
            if outcomes[i] is None:
                outcomes[i] = _outcomes([requests[i]], exc=exc)[0]
    finally:
        stepper.close()
    return outcomes


def add_hist(hist: list[int], k: int, n: int = 1) -> None:
    while len(hist) <= k:
        hist.append(0)
    hist[k] += n


def fold_turns(req: Request, role: str, turns: list[TurnResult], batch_index: int = 0,
               repeat: int = 0) -> tuple[RequestRecord, list[StepRecord]]:
    """One request's turns as its request record and step rows."""
    output: list[int] = []
    steps: list[StepRecord] = []
    hist: list[int] = []
    n_drafts = drafted = accepted = 0
    kept = accepted_kept = 0
    kept_known = True
    chunks: list[int] = []
    turn_chunks: list[int] = []
    gaps: list[float] = []
    decode_s, decode_tokens, e2e, prompt_tokens = 0.0, 0, 0.0, 0
    sources = {t.al_source for t in turns}
    for turn_no, turn in enumerate(turns):
        output += turn.output_ids
        prompt_tokens += turn.prompt_tokens
        e2e += turn.e2e
        if len(turn.output_ids) > 1:
            decode_s += turn.decode_s
            decode_tokens += len(turn.output_ids) - 1
        pooled = turn.steps is None or not turn.counts_from_steps
        if pooled:
            n_drafts, drafted, accepted = n_drafts + turn.n_drafts, drafted + turn.drafted, accepted + turn.accepted
            for k, n in enumerate(turn.hist):
                add_hist(hist, k, n)
            kept_known = kept_known and turn.n_drafts == 0
        gaps += turn.chunk_gaps or ()
        if chunks is not None and turn.chunks is not None:
            chunks += turn.chunks
            turn_chunks.append(len(turn.chunks))
        else:
            chunks = None
        position = turn.lead_tokens
        for s in turn.steps or ():
            k = s.kept if s.kept >= 0 else s.emitted
            steps.append(
                StepRecord(
                    request_id=req.request_id, step=len(steps), batch_index=batch_index, drafted=s.drafted,
                    accepted=s.accepted, emitted=s.emitted, t_draft=s.t_draft, t_verify=s.t_verify,
                    t_accept=s.t_accept, t_step=s.t_step, verify_tokens=s.verify_tokens,
                    iteration=s.iteration, turn=turn_no, repeat=repeat, kept=k, position=position,
                    context_len=turn.prompt_tokens + position, live_batch=s.live_batch,
                )
            )
            position += k
            if s.drafted > 0 and not pooled:
                n_drafts, drafted, accepted = n_drafts + 1, drafted + s.drafted, accepted + s.accepted
                add_hist(hist, s.accepted)
                kept, accepted_kept = kept + k, accepted_kept + min(k, s.accepted)
    source = sources.pop() if len(sources) == 1 else ("none" if not sources else "+".join(sorted(sources)))
    rec = record(
        req, role, output, prompt_tokens=prompt_tokens, ttft=turns[0].ttft if turns else NAN,
        tpot=decode_s / decode_tokens if decode_tokens > 0 else NAN, e2e=e2e, n_steps=len(steps),
        n_drafts=n_drafts, drafted=drafted, accepted=accepted, accepted_hist=tuple(hist), al_source=source,
        repeat=repeat, kept=kept if kept_known else -1, accepted_kept=accepted_kept if kept_known else -1,
        chunks=tuple(chunks) if chunks is not None else (), turn_chunks=tuple(turn_chunks) if chunks is not None else (),
        turn_tokens=tuple(len(t.output_ids) for t in turns), turn_finish=tuple(t.finish for t in turns),
        t_start=turns[0].t_send if turns else NAN, chunk_gaps=tuple(gaps),
    )
    return rec, steps


def record(req: Request, role: str, output: list[int], *, error: str | None = None, repeat: int = 0,
           **fields) -> RequestRecord:
    """The one constructor of ``RequestRecord``: a measured request, or a failed one (``error``)."""
    if error is not None:
        fields = dict(prompt_tokens=0, ttft=NAN, tpot=NAN, e2e=NAN, n_steps=0, n_drafts=0, drafted=0, accepted=0,
                      al_source="none")
    fields["repeat"] = repeat
    return RequestRecord(
        request_id=req.request_id, category=req.category, context_bucket=req.context_bucket,
        entropy_tier=req.entropy_tier, role=role, n_tokens=len(output), output_ids=tuple(output),
        status=STATUS_FAILED if error is not None else STATUS_OK, error=error or "", **fields,
    )
