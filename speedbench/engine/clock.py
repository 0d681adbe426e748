"""Device-synced clock reads, and the lockstep that lets two passes share one stretch of time.

Every timestamp is taken after the device has finished (``Clock.now``).

:class:`Lockstep` runs the baseline and the speculative pass of one block *together*: each
on a thread of its own, exactly one running at any moment, handing over at iteration
boundaries (``Clock.checkpoint``). The one behind in output (turns done + the share of
``max_new_tokens`` its rows have) goes next, so about AL baseline iterations run for each
speculative one and both passes end together. Each pass reads its *own* clock, which only
advances while that pass holds the turn: its TTFT, TPOT, step times and wall time are what it
would have measured alone, while both passes sample the machine's speed over the same
milliseconds. On a shared CPU whose speed drifts at every time scale, pairing at a few
milliseconds is what makes a 2% speedup difference visible (README, "How speedup is
measured"); pass-level pairing (a few hundred ms) leaves several percent of noise per pair.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import torch

_current = threading.local()  # .slot = (Lockstep, role) while a thread runs a lockstep pass


def own_time() -> float:
    """Seconds on the calling pass's own clock (``perf_counter`` outside a lockstep)."""
    slot = getattr(_current, "slot", None)
    return slot[0].own_time(slot[1]) if slot else time.perf_counter()


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


class LockstepStopped(BaseException):
    """Raised in a lockstep pass's thread at its next iteration boundary once the caller stopped
    waiting (Ctrl-C): no engine thread is left running torch when the interpreter exits (which
    aborts with "terminate called without an active exception")."""


class Lockstep:
    """Two jobs (``{role: callable}``), one thread each, taking turns at ``Clock.checkpoint``."""

    def __init__(self, first: str, second: str) -> None:
        self.roles = (first, second)
        self._cv = threading.Condition()
        self._stop = False
        self._turn = first
        self._alive = {first, second}
        self._own = {first: 0.0, second: 0.0}
        self._since = {first: 0.0, second: 0.0}
        self._calls = {first: 0, second: 0}
        self._progress = {first: 0.0, second: 0.0}

    def _partner(self, role: str) -> str:
        return self.roles[1] if role == self.roles[0] else self.roles[0]

    def own_time(self, role: str) -> float:
        return self._own[role] + (time.perf_counter() - self._since[role])

    def begin(self, role: str) -> None:
        self._calls[role] += 1
        self._progress[role] = self._calls[role] - 1.0

    def checkpoint(self, role: str, progress: float) -> None:
        if self._stop:
            raise LockstepStopped
        self._progress[role] = self._calls[role] - 1.0 + min(max(progress, 0.0), 1.0)
        other = self._partner(role)
        if other not in self._alive or self._progress[role] < self._progress[other]:
            return  # alone, or still behind: keep the turn
        self._own[role] += time.perf_counter() - self._since[role]
        with self._cv:
            self._turn = other
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._turn == role or other not in self._alive or self._stop)
        if self._stop:
            raise LockstepStopped
        self._since[role] = time.perf_counter()

    def _job(self, role: str, fn: Callable[[], Any], out: dict, errors: dict) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._turn == role or self._partner(role) not in self._alive or self._stop)
            if self._stop:  # stopped before its first turn
                self._alive.discard(role)
                self._cv.notify_all()
                return
        _current.slot = (self, role)
        self._since[role] = time.perf_counter()
        try:
            out[role] = fn()
        except BaseException as exc:  # re-raised on the caller's thread
            errors[role] = exc
        finally:
            _current.slot = None
            self._own[role] += time.perf_counter() - self._since[role]
            with self._cv:
                self._alive.discard(role)
                self._turn = self._partner(role)
                self._cv.notify_all()

    def run(self, jobs: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run both jobs to the end; their results by role (a job's exception is raised here)."""
        out: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        threads = [threading.Thread(target=self._job, args=(role, jobs[role], out, errors), daemon=True,
                                    name=f"speedbench-lockstep-{role}") for role in self.roles]
        for t in threads:
            t.start()
        try:
            with self._cv:  # not Thread.join: a join interrupted by Ctrl-C can forget its thread (bpo-45274)
                while self._alive:
                    self._cv.wait(0.5)  # wakes for KeyboardInterrupt
        except BaseException:  # Ctrl-C: both passes stop at their next iteration boundary, then it propagates
            with self._cv:
                self._stop = True
                self._cv.notify_all()
                self._cv.wait_for(lambda: not self._alive, timeout=30)
            raise
        for t in threads:
            t.join()
        for role in self.roles:
            if role in errors:
                raise errors[role]
        return out
