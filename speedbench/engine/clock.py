"""Device-synced clock reads, and the lockstep that lets two passes share one stretch of time.

Every timestamp is taken after the device has finished (``Clock.now``).

:class:`Lockstep` runs the baseline and the speculative pass of one block *together*: each
a greenlet on the calling thread, exactly one running at any moment, handing over at iteration
boundaries (``Clock.checkpoint``). The one behind in output (turns done + the share of
``max_new_tokens`` its rows have) goes next, so about AL baseline iterations run for each
speculative one and both passes end together. Each pass reads its *own* clock, which only
advances while that pass holds the turn: its TTFT, TPOT, step times and wall time are what it
would have measured alone, while both passes sample the machine's speed over the same
milliseconds. On a shared CPU whose speed drifts at every time scale, pairing at a few
milliseconds is what makes a 2% speedup difference visible (docs/measurement.md, "How speedup is
measured"); pass-level pairing (a few hundred ms) leaves several percent of noise per pair.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import greenlet
import torch

_current = threading.local()  # .slot = (Lockstep, role) while a lockstep pass runs on this thread


def own_time() -> float:
    """Seconds on the calling pass's own clock (``perf_counter`` outside a lockstep)."""
    slot = getattr(_current, "slot", None)
    return slot[0].own_time(slot[1]) if slot else time.perf_counter()


def current_role() -> str | None:
    """The lockstep role of the running pass (None outside a lockstep)."""
    slot = getattr(_current, "slot", None)
    return slot[1] if slot else None


class Clock:
    """``now()`` syncs the device (CUDA) before reading the pass's clock; on CPU it is a plain read."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else None

    def now(self) -> float:
        if self._sync is not None:
            self._sync(self.device)
        return own_time()

    def begin(self) -> None:
        """A new engine call (one turn of a batch) starts: progress counts from here."""
        slot = getattr(_current, "slot", None)
        if slot:
            slot[0].begin(slot[1])

    def checkpoint(self, progress: float) -> None:
        """An iteration boundary; ``progress`` in [0, 1] of this call's output. In a lockstep the
        turn may pass to the partner here (the device is synced first: its work is this pass's)."""
        slot = getattr(_current, "slot", None)
        if slot:
            if self._sync is not None:
                self._sync(self.device)
            slot[0].checkpoint(slot[1], progress)


class Lockstep:
    """Two jobs (``{role: callable}``) taking turns at ``Clock.checkpoint``, each a greenlet on the
    calling thread.

    One OS thread runs both passes, so an engine's native thread pool is the one it was built
    with: vLLM's CPU worker runs its forwards on the OpenMP team of the thread that built the
    engine, and a second thread issuing forwards gets a second team, which on a small CPU puts
    more OpenMP threads than cores in the process; libgomp then stops spinning between parallel
    regions and a step of the tiny target took 8 ms instead of 4.5 ms (2 cores). A handover is a
    greenlet switch (microseconds) outside both clocks; a pass that is not running is suspended
    inside ``checkpoint``, at an iteration boundary, never inside a native call.
    """

    def __init__(self, first: str, second: str) -> None:
        self.roles = (first, second)
        self._turn = first
        self._alive = {first, second}
        self._own = {first: 0.0, second: 0.0}
        self._since = {first: 0.0, second: 0.0}
        self._calls = {first: 0, second: 0}
        self._progress = {first: 0.0, second: 0.0}
        self._driver: greenlet.greenlet | None = None

    def _partner(self, role: str) -> str:
        return self.roles[1] if role == self.roles[0] else self.roles[0]

    def own_time(self, role: str) -> float:
        return self._own[role] + (time.perf_counter() - self._since[role])

    def begin(self, role: str) -> None:
        self._calls[role] += 1
        self._progress[role] = self._calls[role] - 1.0

    def checkpoint(self, role: str, progress: float) -> None:
        self._progress[role] = self._calls[role] - 1.0 + min(max(progress, 0.0), 1.0)
        other = self._partner(role)
        if other not in self._alive or self._progress[role] < self._progress[other]:
            return  # alone, or still behind: keep the turn
        self._own[role] += time.perf_counter() - self._since[role]
        self._turn = other
        self._driver.switch()  # back here when the partner hands the turn back (or ends)
        self._since[role] = time.perf_counter()

    def run(self, jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run both jobs to the end; their results by role. A job's exception is raised here once its
        partner has run to its end alone; an interrupt (Ctrl-C) stops both at once and propagates."""
        out: dict[str, Any] = {}
        errors: dict[str, Exception] = {}

        def body(role: str) -> None:
            self._since[role] = time.perf_counter()
            try:
                out[role] = jobs[role]()
            except Exception as exc:  # re-raised by run() once the partner is done
                errors[role] = exc
            finally:
                self._own[role] += time.perf_counter() - self._since[role]
                self._alive.discard(role)

        self._driver = greenlet.getcurrent()
        passes = {role: greenlet.greenlet(lambda role=role: body(role), parent=self._driver) for role in self.roles}
        outer = getattr(_current, "slot", None)
        try:
            while self._alive:
                role = self._turn if self._turn in self._alive else next(r for r in self.roles if r in self._alive)
                self._turn = role
                _current.slot = (self, role)
                passes[role].switch()  # returns when it hands over or ends; an interrupt propagates from here
        finally:
            _current.slot = outer
            for g in passes.values():  # after an interrupt: unwind a suspended pass from its checkpoint
                if g and not g.dead:
                    g.throw(greenlet.GreenletExit)
        for role in self.roles:
            if role in errors:
                raise errors[role]
        return out
