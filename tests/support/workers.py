"""How the suite shares the machine between pytest-xdist's workers (tests/conftest.py uses both parts).

* ``ModuleScheduling``: a module is one unit of work, sent whole to one worker, so its module
  fixtures (an engine, a server) start once. The modules that use the session's vLLM engines
  (their source names one of ``SHARED_ENGINES``) are one unit together: those engines start once,
  on one worker. (xdist's own ``loadgroup`` marks do not reach its scheduler under pytest 9.2:
  it renames ``item._nodeid``, which pytest no longer reads.)
* ``hold``: a readers-writer lock on two files, held by a module for its whole life. Ordinary
  modules hold it shared, so two run at once; a module marked ``alone`` holds it exclusively, so
  nothing else runs beside its timings. The turnstile stops new shared holders from overtaking a
  waiting exclusive one.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parents[2]
SHARED_ENGINES = ("vllm_backend", "shipped_pair_on_vllm")  # session fixtures / caches that start vLLM engines


@functools.lru_cache(maxsize=None)
def unit_of(module: str) -> str:
    try:
        source = (ROOT / module).read_text()
    except OSError:
        return module
    return "vllm-shared-engines" if any(name in source for name in SHARED_ENGINES) else module


class ModuleScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid.split("::", 1)[0])


@contextlib.contextmanager
def hold(folder: Path, exclusive: bool):
    with open(folder / "workers-turnstile.lock", "a") as turnstile, open(folder / "workers-room.lock", "a") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
