"""The one rule for a server that is dead or wedged (``backend=openai``, ``backend=vllm_serve``).

A call to a server (a request, ``/models``, ``/metrics``) that failed on transport - no answer within
one of its deadlines, the connection refused, reset or cut - is followed by one probe of the server:
``GET <root><health_path>``, bounded by :data:`PROBE_S` (and ``connect_timeout_s``). A probe that gets
no HTTP answer, or a 5xx (vLLM's ``/health`` when its engine died), marks the server **down** for the
rest of the process; any other answer (200, or 404 from a server without that path) means the server
lives and only that call failed.

Once a server is down, every call to it fails at once with :class:`ServerDown` (the requests of the
pass still in flight are cancelled; those not sent are not sent): each is recorded failed as data,
with the reason. So a dead or wedged server costs one deadline - the first call's - then nothing:
with the defaults a wedged server held a run for requests x ``timeout_s`` plus 30 s per ``/metrics``
read. ``backend=vllm_serve`` starts a server that is down again at its next pass (``ServerSet``).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

PROBE_S = 10.0  # the health probe's bound: a live server's /health answers in milliseconds


class ServerDown(RuntimeError):
    """A call not made (or cut) because its server is dead or wedged."""


def is_transport_failure(exc: BaseException) -> bool:
    """No answer, or the connection refused / reset / cut: the server may be dead or wedged (an HTTP
    status, a malformed or inconsistent stream is an answer: the server lives)."""
    import httpx

    from .openai_stream import DeadlineExceeded

    return isinstance(exc, (DeadlineExceeded, httpx.TransportError, ConnectionError, TimeoutError))


def server_root(base_url: str) -> str:
    """``http://host:port/prefix/v1`` -> ``http://host:port/prefix`` (where ``/health`` and ``/metrics`` are)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


@dataclass
class DownServers:
    """The servers found dead or wedged in this process: root URL -> why (one per backend)."""

    why: dict[str, str] = field(default_factory=dict)

    def reason(self, root: str) -> str | None:
        return self.why.get(root)

    def mark(self, root: str, why: str) -> None:
        self.why.setdefault(root, why)

    def forget(self, root: str) -> None:
        """A server started again on this URL (``vllm_serve``)."""
        self.why.pop(root, None)


class PassWatch:
    """The rule for one pass's calls to one server (built in the pass's event loop)."""

    def __init__(self, down: DownServers, base_url: str, health_path: str, probe_s: float) -> None:
        self.down, self.root = down, server_root(base_url)
        self.health_url = self.root + (health_path if health_path.startswith("/") else "/" + health_path)
        self.probe_s = probe_s
        self._event = asyncio.Event()
        self._lock = asyncio.Lock()
        if down.reason(self.root):
            self._event.set()

    def error(self) -> ServerDown:
        return ServerDown(f"server {self.root} is dead or wedged ({self.down.reason(self.root)}): not sent")

    async def call(self, client, coro):
        """Await ``coro`` (one call to the server) under the rule: not made when the server is down, cut
        when it is found down meanwhile, followed by the probe when it failed on transport."""
        if self.down.reason(self.root):
            coro.close()
            raise self.error()
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if not task.done():  # another call found the server down: this one ends now
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled: the reason is the server's
                pass
            raise self.error()
        exc = task.exception()
        if exc is None:
            return task.result()
        if is_transport_failure(exc):
            await self._judge(client, exc)
        raise exc

    async def _judge(self, client, exc: BaseException) -> None:
        """One probe at a time; the first that gets no answer marks the server down for every call."""
        async with self._lock:
            if self.down.reason(self.root) is None:
                answer = await self._probe(client)
                if answer is not None:
                    first = str(exc).strip() or type(exc).__name__
                    self.down.mark(self.root, f"{type(exc).__name__}: {first}; then GET {self.health_url}: {answer}")
            if self.down.reason(self.root):
                self._event.set()

    async def _probe(self, client) -> str | None:
        """Why the server counts as dead or wedged (None: it answered, it lives)."""
        try:
            resp = await asyncio.wait_for(client.get(self.health_url, timeout=self.probe_s), self.probe_s)
        except asyncio.TimeoutError:
            return f"no answer within {self.probe_s:g} s"
        except Exception as exc:  # noqa: BLE001 - refused, reset: no answer
            return f"no answer ({type(exc).__name__}: {str(exc).strip() or 'connection failed'})"
        if resp.status_code >= 500:
            return f"HTTP {resp.status_code}"
        return None
