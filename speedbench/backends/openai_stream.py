"""One streamed request to an OpenAI-compatible server, as timed chunks.

Each server-sent event is a chunk; its arrival time is read with ``perf_counter`` as soon as
the line is parsed. Tokens per chunk are counted, in order of trust, from:

1. ``token_ids`` in the choice (vLLM's ``return_token_ids`` extension): exact ids;
2. the choice's logprobs (``logprobs.tokens`` for completions, ``logprobs.content`` for chat);
3. ``usage.completion_tokens`` growth (vLLM's ``continuous_usage_stats``);
otherwise the count is unknown (None) and chunk-based AL is unavailable.
The final usage chunk may carry per-request spec-decode metrics (vLLM's
``--per-request-spec-decode-metrics``) under ``metrics.speculative_decoding``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Chunk:
    t: float  # perf_counter at arrival
    n_tokens: int | None
    token_ids: list[int] | None
    text: str


@dataclass
class StreamResult:
    t_send: float
    chunks: list[Chunk] = field(default_factory=list)  # chunks that carried generated tokens or text
    usage: dict[str, Any] | None = None
    spec_metrics: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False  # the server sent ``data: [DONE]``

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def token_ids(self) -> list[int] | None:
        if not self.chunks or any(c.token_ids is None for c in self.chunks):
            return None
        return [t for c in self.chunks for t in c.token_ids]

    @property
    def counts(self) -> list[int] | None:
        """Tokens per chunk; None when any chunk's count is unknown."""
        if any(c.n_tokens is None for c in self.chunks):
            return None
        return [c.n_tokens for c in self.chunks]


def parse_event(line: str) -> dict[str, Any] | None:
    """The JSON payload of one ``data: ...`` line; None for keep-alives, comments and ``[DONE]``."""
    line = line.strip()
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"malformed JSON in the stream ({exc.msg} at column {exc.colno}): {payload[:200]!r}") from None
    if not isinstance(event, dict):
        raise RuntimeError(f"malformed event in the stream (not a JSON object): {payload[:200]!r}")
    return event


def chunk_from_event(event: dict[str, Any], t: float, prev_completion_tokens: int | None) -> Chunk | None:
    """The generated tokens an event carries (None when it carries none, e.g. the final usage chunk)."""
    if "error" in event and not event.get("choices"):
        raise RuntimeError(f"server error in stream: {event['error']}")
    choices = event.get("choices") or []
    if not choices:
        return None
    choice = choices[0]
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or {}).get("content") or ""
    ids = choice.get("token_ids")
    n: int | None = None
    if ids is not None:
        n = len(ids)
    else:
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            if lp.get("tokens") is not None:
                n = len(lp["tokens"])
            elif lp.get("content") is not None:
                n = len(lp["content"])
        usage = event.get("usage")
        if n is None and usage and prev_completion_tokens is not None and usage.get("completion_tokens") is not None:
            n = usage["completion_tokens"] - prev_completion_tokens
    if not text and not n:
        return None
    return Chunk(t=t, n_tokens=n, token_ids=list(ids) if ids is not None else None, text=text)


@dataclass(frozen=True)
class Deadlines:
    """Bounds on one request: ``read`` between bytes, ``connect``, the first token, and the whole request.

    A server that sends SSE keep-alive comments and never a token keeps every read short, so
    only the first-token and total deadlines end it.
    """

    read: float = 600.0
    connect: float = 30.0
    first_token: float = 600.0
    total: float = 1800.0


class DeadlineExceeded(RuntimeError):
    pass


async def stream_request(client, url: str, body: dict[str, Any], headers: dict[str, str],
                         timeout: float | Deadlines) -> StreamResult:
    """POST ``body`` with ``stream: true`` to ``url`` and time every chunk, within ``timeout``'s deadlines."""
    import asyncio

    import httpx

    limits = timeout if isinstance(timeout, Deadlines) else Deadlines(read=timeout, first_token=timeout, total=max(timeout, 1800.0))
    result = StreamResult(t_send=time.perf_counter())
    first = min(limits.first_token, limits.total)
    phase = {"what": f"no token within {first:g} s (first-token deadline)"}
    try:
        async with asyncio.timeout(first) as deadline:
            await _stream(client, url, body, headers, limits, result, deadline, phase)
    except TimeoutError:
        got = sum(c.n_tokens or 0 for c in result.chunks)
        raise DeadlineExceeded(f"{phase['what']}; {got} token(s) received from {url}") from None
    except httpx.ConnectTimeout:
        raise DeadlineExceeded(f"could not connect to {url} within {limits.connect:g} s") from None
    except httpx.ReadTimeout:
        got = sum(c.n_tokens or 0 for c in result.chunks)
        raise DeadlineExceeded(f"no data from {url} for {limits.read:g} s (read timeout); {got} token(s) received") from None
    return result


async def _stream(client, url, body, headers, limits: Deadlines, result: StreamResult, deadline, phase) -> None:
    import httpx

    loop_time = deadline.when() - min(limits.first_token, limits.total)  # the loop clock at send
    completion_tokens = 0
    timeout = httpx.Timeout(limits.read, connect=limits.connect)
    async with client.stream("POST", url, json=body, headers=headers, timeout=timeout) as resp:
        if resp.status_code != 200:
            detail = (await resp.aread()).decode(errors="replace")[:500]
            raise RuntimeError(f"HTTP {resp.status_code} from {url}: {detail}")
        async for line in resp.aiter_lines():
            if line.strip() in ("data: [DONE]", "data:[DONE]"):
                result.done = True
                continue
            event = parse_event(line)
            if event is None:
                continue
            t = time.perf_counter()
            chunk = chunk_from_event(event, t, completion_tokens)
            usage = event.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                completion_tokens = usage["completion_tokens"]
                result.usage = usage
            metrics = event.get("metrics") or {}
            if metrics.get("speculative_decoding"):
                result.spec_metrics = metrics["speculative_decoding"]
            for choice in event.get("choices") or []:
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
            if chunk is not None:
                if not result.chunks:  # first token: from now on only the whole-request deadline applies
                    deadline.reschedule(loop_time + limits.total)
                    phase["what"] = f"the request took longer than {limits.total:g} s (total deadline)"
                result.chunks.append(chunk)
