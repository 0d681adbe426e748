"""``backend=openai``: any OpenAI-compatible server (vllm serve, SGLang, TensorRT-LLM serve).

The speculative run goes to ``backend.options.base_url``; the baseline to
``backend.options.baseline_url``, a second server of the same target without speculation.
Speculation is configured on the server, so the drafter config here only names the cell
(method, D); with vLLM's ``/metrics`` the server's D is checked against ``drafter.num_speculative_tokens``
and a speculative pass in which it drafted nothing fails (``check_drafted``).

Requests stream from ``/v1/completions`` (prompt token ids rendered with the same chat renderer
as every other backend) or ``/v1/chat/completions`` (``endpoint: chat``; the server applies
its chat template), with at most B requests in flight (B = ``batch_size``) and an optional
Poisson ``load.request_rate``. Per request:

* TTFT = first chunk with tokens - send; TPOT = (t_last - t_first) / (tokens - 1); step times =
  chunk inter-arrival times (a chunk is one engine step for vLLM);
* acceptance, ``al_source``: ``steps`` when the server returns per-request spec-decode metrics
  (vLLM ``--per-request-spec-decode-metrics``), else ``chunks``: tokens per chunk with the
  first (prefill) chunk and the final chunk (possibly cut) trimmed. The whole stream, every chunk,
  is kept in the records for ``al_speed_bench`` (the SPEED-Bench tool's current rule counts the
  first chunk and takes only the stop token off the last: docs/acceptance.md). Chunk AL counts
  every step, also steps where a lookup drafter proposed nothing, and a slow client can see
  two engine steps merged into one chunk: ``extra`` reports the merged-chunk fraction.
  ``drafted`` from chunks is nominal (D per step).
* ``/metrics`` counter deltas over the whole call go to ``extra["counters"]`` (engine-wide:
  other traffic on the server pollutes them).

Each request is bounded by ``timeout_s`` between bytes, ``connect_timeout_s``,
``first_token_timeout_s`` (default: ``timeout_s``) and ``request_timeout_s`` for the whole request
(default: 3 x ``timeout_s``), so a server that trickles keep-alives and never a token cannot hold a
run. A server that is dead or wedged (a call got no answer, then neither did ``GET <health_path>``)
costs one deadline: every other call to it fails at once, as data (``server_health``). A response
counts as ``ok`` only when the stream ended properly (a ``finish_reason`` or ``data: [DONE]``) and
its token count fits the request (at least one token, at most ``max_tokens``; exactly
``max_tokens`` with ``finish_reason=length`` or ``ignore_eos``; equal to the server's own
``usage.completion_tokens``); otherwise the request is recorded failed with the reason.

The API key is read from the environment variable named by ``api_key_env`` at request time;
it is never written to results or provenance.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import random
import time
from typing import Any

from .. import models
from . import spec_counters, stream_steps
from ..drafters.registry import is_baseline
from .base import NAN, Backend, GenerateSpec, Session, StepCounts, TurnInput, TurnResult
from .openai_stream import Deadlines, StreamResult, stream_request
from .server_health import PROBE_S, DownServers, PassWatch, ServerDown, server_root

AUX_READ_S = 30.0  # /models and /metrics reads
TIMEOUT_OPTIONS = ("timeout_s", "connect_timeout_s", "first_token_timeout_s", "request_timeout_s")


def deadlines(opts: dict[str, Any]) -> Deadlines:
    """The per-request bounds from ``backend.options`` (raises ``ValueError`` naming a bad one)."""
    for key in TIMEOUT_OPTIONS:
        value = opts.get(key)
        if value is None and key in ("first_token_timeout_s", "request_timeout_s"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"backend.options.{key} must be a positive number of seconds, got {value!r}")
    read = float(opts["timeout_s"])
    first = float(opts["first_token_timeout_s"] or read)
    total = float(opts["request_timeout_s"] or 3 * read)
    return Deadlines(read=read, connect=float(opts["connect_timeout_s"]), first_token=first, total=max(total, first))


def check_complete(res: StreamResult, n_tokens: int, exact: bool, spec: GenerateSpec) -> None:
    """Raise ``RuntimeError`` with the reason when a stream did not end properly or its length is wrong."""
    if res.finish_reason is None and not res.done:
        raise RuntimeError(f"incomplete response: the stream ended after {n_tokens} token(s) without a "
                           "finish_reason or [DONE] (connection closed early?)")
    limit = spec.max_new_tokens
    counted = (res.usage or {}).get("completion_tokens")
    known = n_tokens if exact else counted if isinstance(counted, int) else None
    if known is not None and known > limit:
        raise RuntimeError(f"inconsistent response: {known} tokens for max_tokens={limit}")
    if exact and isinstance(counted, int) and counted != n_tokens:
        raise RuntimeError(f"inconsistent response: {n_tokens} token ids streamed but usage.completion_tokens={counted}")
    if known is not None and known < limit and (res.finish_reason == "length" or spec.ignore_eos):
        why = "finish_reason=length" if res.finish_reason == "length" else "ignore_eos"
        raise RuntimeError(f"inconsistent response: {known} tokens with {why}, expected max_tokens={limit}")


BASELINE_URL_MISSING = "backend=openai needs backend.options.baseline_url: a server of the same target without speculation"


def _server_problems(opts: dict[str, Any]) -> list[str]:
    """The speculative server's URL, endpoint and deadlines in ``backend.options``."""
    p = []
    if not opts.get("base_url"):
        p.append("backend=openai needs backend.options.base_url (the speculative server, e.g. http://127.0.0.1:8000/v1)")
    if opts.get("endpoint") not in ("completions", "chat"):
        p.append(f"backend.options.endpoint must be completions or chat, got {opts.get('endpoint')!r}")
    try:
        deadlines(opts)
    except ValueError as exc:
        p.append(str(exc))
    return p


class OpenAIBackend(Backend):
    @classmethod
    def preflight(cls, engine, batch_size: int, drafter=None) -> list[str]:
        opts = dataclasses.asdict(engine.options) if dataclasses.is_dataclass(engine.options) else dict(engine.options)
        p = _server_problems(opts)
        if not opts.get("baseline_url"):
            p.append(BASELINE_URL_MISSING)
        elif (drafter is not None and not is_baseline(drafter.method)
              and str(opts["baseline_url"]).rstrip("/") == str(opts.get("base_url") or "").rstrip("/")):
            p.append("backend.options.baseline_url equals base_url: the baseline must be a server without speculation")
        return p

    def __init__(self, target, engine, seed: int = 0) -> None:
        super().__init__(target, engine, seed)
        engine = self.engine  # options typed
        self.opts = dataclasses.asdict(engine.options)
        self._open_client(target, _server_problems(self.opts))  # baseline_url: the validation pass's preflight

    def _open_client(self, target, problems: list[str]) -> None:
        """What a client of OpenAI-compatible servers holds (once its options passed ``problems``):
        the request deadlines, the target's tokenizer, the served model names, the servers seen down."""
        if problems:
            raise ValueError(problems[0])
        self.deadlines = deadlines(self.opts)
        self.tokenizer = models.load_tokenizer(target.path, target.revision, target.trust_remote_code)
        self._models: dict[str, str] = {}
        self.down = DownServers()

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": "openai-compatible server", "device": "remote",
                "base_url": self.opts["base_url"], "baseline_url": self.opts["baseline_url"],
                "endpoint": self.opts["endpoint"]}

    # ---- plumbing ----------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        env = self.opts["api_key_env"]
        if env and os.environ.get(env):
            return {"Authorization": f"Bearer {os.environ[env]}"}
        return {}

    def _metrics_url(self, base_url: str) -> str:
        return server_root(base_url) + "/metrics"

    def _read_s(self) -> float:
        """The bound on a /models or /metrics read: 30 s, or the requests' own read deadline when shorter."""
        return min(AUX_READ_S, self.deadlines.read)

    def watch(self, base_url: str) -> PassWatch:
        """The dead-or-wedged rule for one pass's calls to ``base_url`` (``server_health``)."""
        return PassWatch(self.down, base_url, self.opts["health_path"], min(PROBE_S, self.deadlines.connect))

    async def _model_name(self, client, base_url: str) -> str:
        if self.opts["model"]:
            return self.opts["model"]
        if base_url not in self._models:
            resp = await client.get(base_url.rstrip("/") + "/models", headers=self._headers(), timeout=self._read_s())
            resp.raise_for_status()
            self._models[base_url] = resp.json()["data"][0]["id"]
        return self._models[base_url]

    async def _counters(self, client, base_url: str):
        """The server's spec-decode counters; None when it has no /metrics page (a call that gets no answer raises)."""
        if not self.opts["metrics"]:
            return None
        resp = await client.get(self._metrics_url(base_url), headers=self._headers(), timeout=self._read_s())
        if resp.status_code != 200:
            return None
        return spec_counters.from_prometheus_text(resp.text)

    def _body(self, model: str, prompt: list[int] | list[dict], spec: GenerateSpec) -> dict[str, Any]:
        s = spec.sampling
        body: dict[str, Any] = {
            "model": model, "max_tokens": spec.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "seed": s.seed, "stream": True, "stream_options": {"include_usage": True},
        }
        if self.opts["endpoint"] == "chat":
            body["messages"] = prompt
        else:
            body["prompt"] = prompt
        if self.opts["vllm_extensions"]:  # accepted by vLLM (and partly SGLang); OpenAI proper rejects them
            body["stream_options"]["continuous_usage_stats"] = True
            body |= {"return_token_ids": True, "ignore_eos": spec.ignore_eos, "top_k": s.top_k if s.top_k > 0 else -1}
        elif spec.ignore_eos:
            raise ValueError("ignore_eos needs backend.options.vllm_extensions=true (a server that accepts ignore_eos)")
        return body | dict(self.opts["extra_body"])

    # ---- generation --------------------------------------------------------------------------------
    def session(self, spec: GenerateSpec) -> Session:
        return _OpenAISession(self, spec)

    def prompt(self, history: list[tuple[str, str]], user: str):
        if self.opts["endpoint"] == "chat":
            messages: list[dict] = []
            for u, a in history:
                messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            return messages + [{"role": "user", "content": user}]
        from ..data.chat import render_conversation

        return render_conversation(self.tokenizer, history, user, tokenize=True)

    def turn_result(self, res: StreamResult, prompt, spec: GenerateSpec) -> TurnResult:
        if not res.chunks:
            raise RuntimeError(f"the server streamed no tokens (finish_reason={res.finish_reason})")
        ids = res.token_ids
        text = res.text if ids is None else self.tokenizer.decode(ids, skip_special_tokens=True)
        exact = ids is not None
        if ids is None:  # the server did not return ids: re-tokenise its text (approximate for agreement)
            ids = self.tokenizer(res.text, add_special_tokens=False)["input_ids"]
        check_complete(res, len(ids), exact, spec)
        t_first, t_last = res.chunks[0].t, res.chunks[-1].t
        local_len = len(prompt) if self.opts["endpoint"] == "completions" else 0  # chat: the server's template
        prompt_tokens = int((res.usage or {}).get("prompt_tokens", local_len))
        turn = TurnResult(ids, prompt_tokens, t_first - res.t_send, t_last - t_first, t_last - res.t_send,
                          steps=None, al_source="none", text=text)
        counts = res.counts
        d = spec.drafter.num_speculative_tokens
        turn.finish = {"stop": "stop", "length": "length"}.get(str(res.finish_reason or ""), "")
        turn.t_send = res.t_send
        # chunk arrival times of the chunks with tokens (every chunk when the counts are not known)
        times = [c.t for c, n in zip(res.chunks, counts) if n > 0] if counts is not None else [c.t for c in res.chunks]
        turn.chunk_gaps = [b - a for a, b in zip(times, times[1:])]
        if counts is not None:
            turn.chunks = [n for n in counts if n > 0]  # the stream itself: what the SPEED-Bench tool counts
            turn.lead_tokens = counts[0]
            # first chunk = prefill, last chunk = possibly cut by max_tokens/EOS: trimmed (SPEED-Bench)
            middle = list(zip(res.chunks[1:-1], counts[1:-1]))
            turn.steps = [
                StepCounts(d if d else 0, n - 1, emitted=n, t_step=c.t - p.t)
                for (c, n), p in zip(middle, res.chunks[:-2])
            ]
            turn.al_source = "chunks" if d else "none"
        sd = res.spec_metrics
        if d and sd and counts is not None and self._steps_from_metrics(turn, sd, times):
            return turn
        if d and sd and sd.get("acceptance_histogram") is not None:
            hist = list(sd["acceptance_histogram"])
            turn.counts_from_steps = False
            turn.n_drafts = int(sd.get("num_spec_steps", sum(hist)))
            turn.drafted = int(sd.get("num_draft_tokens", 0))
            turn.accepted = int(sd.get("num_accepted_draft_tokens", sum(j * n for j, n in enumerate(hist))))
            turn.hist = hist
            turn.al_source = "steps"
        return turn

    def _steps_from_metrics(self, turn: TurnResult, sd: dict, times: list[float]) -> bool:
        """With the server's per-step lists (vLLM ``detailed``): step rows in stream order, matched to
        the chunks (``stream_steps``), with their acceptance and kept tokens; a step without a proposal
        (not listed) is a row that drafted nothing; a step alone in its chunk gets the chunk's
        inter-arrival time. False when the chunks cannot be matched (the pooled histogram is used)."""
        acc, drafted = sd.get("per_step_accepted"), sd.get("per_step_drafted")
        if not acc or drafted is None or len(acc) != len(drafted):
            return False
        listed = [StepCounts(int(k), int(a)) for k, a in zip(drafted, acc)]
        found = stream_steps.match(turn.chunks or [], [r.emitted for r in listed], lead=1)
        if found is None:
            return False
        rows = []
        for u, idx in enumerate(found.order):
            row = listed[idx] if idx >= 0 else StepCounts(0, 0)
            row.kept = found.kept[idx] if idx >= 0 else 1
            if found.alone(u):
                c = found.chunk_of[u]
                row.t_step = times[c] - times[c - 1]
            rows.append(row)
        turn.steps, turn.counts_from_steps, turn.al_source = rows, True, "steps"
        return True

    def extra(self, spec, records, steps, before, after) -> dict[str, Any]:
        d = spec.drafter.num_speculative_tokens
        extra: dict[str, Any] = {"engine": "openai-compatible server", "endpoint": self.opts["endpoint"],
                                 "timing_split": "missing: a server exposes no per-step draft/verify times",
                                 "timing_source": "missing: OpenAI-compatible servers expose no draft/verify/accept "
                                                  "time (per-step time = chunk inter-arrival at the client)"}
        sizes = stream_steps.middle_chunks(records)
        limit = d + 1 if d else 1
        exact = stream_steps.merged_chunks(records, steps) if d else None
        if exact is not None:  # every chunk matched to the server's own steps
            extra["merged_chunks"], extra["stream_chunks"] = exact
            extra["merged_chunk_rule"] = "exact: chunks matched to the server's per-request steps"
        else:  # a lower bound: only chunks longer than one step can be seen as merged
            extra["merged_chunks"], extra["stream_chunks"] = sum(n > limit for n in sizes), len(sizes)
            extra["merged_chunk_rule"] = f"lower bound: chunks with more than {limit} token(s)"
        n = extra["stream_chunks"]
        extra["merged_chunk_frac"] = extra["merged_chunks"] / n if n else NAN
        if d:
            extra["al_chunks"] = 1 + sum(n - 1 for n in sizes) / len(sizes) if sizes else NAN
            sources = sorted({r.al_source for r in records if r.status == "ok"})
            extra["al_detail"] = (
                "per-request spec-decode metrics from the server's response (per verify step)" if sources == ["steps"]
                else "tokens per streamed chunk, first and last chunk trimmed; drafted is nominal (D per step)"
                if sources == ["chunks"] else f"mixed/unavailable: {sources}"
            )
        if before is not None and after is not None:
            delta = after - before
            extra["counters"] = delta.as_dict()
            extra["counters_note"] = "engine-wide /metrics delta over this call: other traffic on the server is included"
        else:
            extra["counters"] = "unavailable"
        return extra

    def _check_server(self, counters, spec) -> None:
        """With vLLM's /metrics: the spec server's D must be the drafter's; the baseline must not speculate."""
        if counters is None:
            return
        d = spec.drafter.num_speculative_tokens
        if d and counters.per_pos and len(counters.per_pos) != d:
            raise ValueError(
                f"the server at {self.opts['base_url']} speculates {len(counters.per_pos)} tokens but "
                f"drafter.num_speculative_tokens={d}"
            )
        if not d and counters.per_pos:
            raise ValueError(f"the baseline server at {self.opts['baseline_url']} has speculative decoding on")

    def check_drafted(self, before, after, spec, records) -> None:
        """With vLLM's /metrics: a speculative pass whose server drafted nothing (0 drafts over the pass,
        tokens generated) measured no drafter: the pass fails, naming the URL, rather than record AL 1."""
        d = spec.drafter.num_speculative_tokens
        if not d or before is None or after is None or not after.vllm_page:
            return
        if (after - before).drafts > 0 or not any(r.status == "ok" and r.n_tokens > 1 for r in records):
            return
        why = ("no spec-decode counters: speculative decoding is off there" if not after.per_pos
               else "its spec-decode counters did not move")
        raise ValueError(f"the speculative server at {self.opts['base_url']} drafted nothing over the pass "
                         f"(/metrics: 0 drafts, {why}); drafter.method={spec.drafter.method} "
                         f"D={d} was not measured")


class _OpenAISession(Session):
    """One pass against one server: the speculative one, or the baseline for drafter ``none``."""

    def __init__(self, backend: OpenAIBackend, spec: GenerateSpec) -> None:
        super().__init__(backend, spec)
        o = backend.opts
        self.base_url = o["base_url"] if not is_baseline(spec.drafter.method) else o["baseline_url"]
        self.url = self.base_url.rstrip("/") + ("/chat/completions" if o["endpoint"] == "chat" else "/completions")
        self.rng = random.Random(spec.sampling.seed)
        load = spec.load
        self.rate = float(load.request_rate) if load is not None else math.inf  # load.request_rate: the one setting
        self.burstiness = float(load.burstiness) if load is not None else 1.0
        self.before = self.after = None

    def render(self, history, user):
        return self.backend.prompt([(u, self.reply_text(r)) for u, r in history], user)

    async def start(self) -> None:
        import httpx

        b = self.backend
        self.client = httpx.AsyncClient(limits=httpx.Limits(max_connections=self.spec.batch_size + 4))
        self.watch = b.watch(self.base_url)
        try:
            self.model = await self.watch.call(self.client, b._model_name(self.client, self.base_url))
        except ServerDown:  # found dead or wedged: every request of the pass fails as data, none is sent
            self.model = ""
        self.before = await self._counters()
        b._check_server(self.before, self.spec)
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()  # the client's own cost: this process's CPU time over the pass
        self.arrivals = [0.0]

    async def arrive(self, index: int) -> None:
        """Request ``index`` arrives at once, or at ``request_rate`` per second with gamma inter-arrivals
        of shape ``burstiness`` (1 = Poisson; ``arrivals``)."""
        from ..arrivals import interarrival

        while len(self.arrivals) <= index:
            self.arrivals.append(self.arrivals[-1] + interarrival(self.rng, self.rate, self.burstiness))
        wait = self.t0 + self.arrivals[index] - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _counters(self):
        """/metrics through the dead-or-wedged rule; None when unavailable (no page, or no answer)."""
        try:
            return await self.watch.call(self.client, self.backend._counters(self.client, self.base_url))
        except Exception:  # noqa: BLE001 - counters are simply unavailable
            return None

    async def run_turn_async(self, turn: TurnInput) -> TurnResult:
        b = self.backend
        body = b._body(self.model, turn.prompt, self.spec)
        # a dead or wedged server: not sent (or cut when found so meanwhile); a ServerDown is this request's failure
        res = await self.watch.call(self.client, stream_request(self.client, self.url, body, b._headers(), b.deadlines))
        return b.turn_result(res, turn.prompt, self.spec)

    async def stop(self) -> None:
        self.client_s = (time.process_time() - self.cpu0, time.perf_counter() - self.t0)
        try:
            self.after = await self._counters()
        finally:
            await self.client.aclose()

    def finish(self, records, steps) -> dict[str, Any]:
        self.backend.check_drafted(self.before, self.after, self.spec, records)
        return self.backend.extra(self.spec, records, steps, self.before, self.after) | {"client": self.client_cost(records)}

    def client_cost(self, records) -> dict[str, Any]:
        """The client's CPU time over the pass (``metrics.latency.client_cost``)."""
        from ..metrics.latency import client_cost

        cpu, wall = getattr(self, "client_s", (math.nan, math.nan))
        return client_cost(cpu, wall, sum(len(r.chunks) for r in records))
