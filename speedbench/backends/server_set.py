"""Server processes the harness starts itself (``backend=vllm_serve``): launch, health check, logs, stop.

A :class:`ServerSet` is a context manager holding one server process per role (the baseline,
one per speculative config). Each server:

* listens on a free loopback port of 127.0.0.1 (the port is picked just before the start);
* runs in a session and process group of its own (``start_new_session``), so stopping it stops every
  process it started (vLLM's engine core, its workers), also those that moved to a process group of
  their own within its session, and also when the server itself already died (its API process
  killed, as the OOM killer would: its children outlive it); on Linux it also gets SIGTERM when the
  harness dies (``PR_SET_PDEATHSIG``), so even a SIGKILLed harness leaves no server behind
  (the server's own children go with it when it shuts down);
* writes stdout and stderr to ``<log_dir>/server-<role>.log`` (the run folder's
  ``engine-logs/``) through the harness, redacted line by line (``redact``: a key given as
  ``--api-key VALUE`` or from the environment never reaches the file, nor its command line there);
* is ready when ``GET <root><health_path>`` answers 200 within ``ready_timeout_s``; its
  start-up time (launch to ready) is recorded in :attr:`Server.startup_s` and never measured.

At most ``max_servers`` are alive in this process, counted over every :class:`ServerSet` (one per
backend: a sweep over a backend setting such as ``target`` or ``engine_args`` makes one per job): to
start one more, the oldest server not needed now is stopped first, whichever set holds it.

Every live server is also known to this module: an ``atexit`` hook and SIGTERM / SIGHUP
handlers (installed with the first start) stop them all, so a normal exit, a failure, Ctrl-C
(KeyboardInterrupt unwinds to the hook) and a SIGTERM of the harness all stop the servers.
Servers are stopped together (one thread each): SIGTERM to the group, SIGKILL after
``STOP_GRACE_S`` for a ready server, after ``STARTING_GRACE_S`` for one still starting (vLLM's
ignores SIGTERM until its engine is up).
"""
from __future__ import annotations

import atexit
import itertools
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from pathlib import Path

log = logging.getLogger(__name__)
HOST = "127.0.0.1"
STOP_GRACE_S = 20.0  # a ready server: time to finish its requests and exit on SIGTERM
# a server still starting: vLLM's ignores SIGTERM until its engine is up (measured: alive 40 s after
# it) and has no request to finish, so it is SIGKILLed sooner
STARTING_GRACE_S = 2.0
STARTUP_NOTE_S = 15.0  # while a server starts, a line on stderr this often (its time so far and last log line)
_LIVE: dict[int, "Server"] = {}
_LOCK = threading.Lock()
_SETS: "weakref.WeakSet[ServerSet]" = weakref.WeakSet()  # every ServerSet of this process (the max_servers count)
_STARTED = itertools.count()  # start order of the servers (the oldest is stopped first)
_INSTALLED: list[bool] = [False]


PORT_PLACEHOLDERS = ("host", "port")
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # {name}; JSON ({"a": 1}) and other braces are not one


def placeholder_names(arg) -> list[str]:
    """The ``{name}`` placeholders in one command-line argument."""
    return _NAMED.findall(arg) if isinstance(arg, str) else []


def fill_placeholders(arg: str, values: dict) -> str:
    """``arg`` with each ``{name}`` of ``values`` replaced and every other character as written: an
    argument holding JSON (``{"max_position_embeddings": 2048}``) reaches the server as it is (no ``str.format``)."""
    return _NAMED.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), arg)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _die_with_parent():
    """A function for the child (run between fork and exec) that asks the kernel to send it SIGTERM
    when the harness dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``); None elsewhere. libc is
    loaded here, in the parent, so the child only makes the call (no imports after fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGTERM)

    def set_death_signal() -> None:  # pragma: no cover - runs in the child
        prctl(1, sig)  # PR_SET_PDEATHSIG

    return set_death_signal


class Server:
    """One server process: ``argv`` plus ``--host``/``--port`` style arguments from ``port_args``."""

    def __init__(self, role: str, argv: list[str], log_path: Path, health_path: str = "/health",
                 port_args: tuple[str, ...] = ("--host", "{host}", "--port", "{port}")) -> None:
        self.role, self.log_path, self.health_path = role, Path(log_path), health_path
        self.port = free_port()
        self.argv = [*argv, *(fill_placeholders(a, {"host": HOST, "port": self.port}) for a in port_args)]
        self.root = f"http://{HOST}:{self.port}"
        self.url = self.root + "/v1"
        self.proc: subprocess.Popen | None = None
        self.startup_s = float("nan")
        self._t0 = 0.0
        self.order = next(_STARTED)
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        from .. import redact

        _install_handlers()
        redact.collect(self.argv)  # a value after --api-key (or any credential flag) is a secret from now on
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as sink:
            sink.write(f"# {' '.join(redact.redact(self.argv))}\n".encode())
        self._t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent(), env=child_env())
        with open(self.log_path, "ab") as sink:  # the group to look for if anything is ever left behind
            sink.write(f"# pid {self.proc.pid} (process group {self.proc.pid})\n".encode())
        self._pump = threading.Thread(target=_copy_redacted, args=(self.proc.stdout, self.log_path),
                                      name=f"server-log-{self.role}", daemon=True)
        self._pump.start()
        with _LOCK:
            _LIVE[self.proc.pid] = self
        log.info("server %s: pid %d on %s, log %s", self.role, self.proc.pid, self.url, self.log_path)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """Its health check answered 200 (``wait_ready`` returned)."""
        return math.isfinite(self.startup_s)

    def wait_ready(self, timeout_s: float) -> float:
        """Block until the health check answers 200; returns the start-up time. Raises (and stops the
        server) when it exits or is not ready within ``timeout_s``."""
        deadline = self._t0 + timeout_s
        next_note = self._t0 + STARTUP_NOTE_S
        while time.perf_counter() < deadline:
            if time.perf_counter() >= next_note:
                self._note_startup()
                next_note += STARTUP_NOTE_S
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                self.stop()
                raise RuntimeError(f"server {self.role} ({self.argv[0]} ...) exited with code {code} before it was "
                                   f"ready; log {self.log_path}: {self.tail()}")
            try:
                with urllib.request.urlopen(self.root + self.health_path, timeout=5) as r:
                    if r.status == 200:
                        self.startup_s = time.perf_counter() - self._t0
                        log.info("server %s ready after %.1f s", self.role, self.startup_s)
                        return self.startup_s
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"server {self.role} not ready after {timeout_s:g} s (backend.options.ready_timeout_s); "
                           f"log {self.log_path}: {self.tail()}")

    def _note_startup(self) -> None:
        """Where a slow start is (vLLM takes a minute or two): seconds so far and the log's last line."""
        try:
            lines = self.log_path.read_text(errors="replace")[-2000:].strip().splitlines()
        except OSError:
            lines = []
        last = lines[-1].strip()[:100] if lines else "(nothing logged yet)"
        print(f"server {self.role}: starting, {time.perf_counter() - self._t0:.0f} s so far (log {self.log_path}: {last})",
              file=sys.stderr, flush=True)

    def tail(self, n: int = 1500) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace")[-n:].strip().splitlines()[-8:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after ``STOP_GRACE_S``, then SIGKILL to every process
        left in the server's session (a worker that made a process group of its own); idempotent, and
        the same for a server that already died (its children are still its group's and session's)."""
        proc = self.proc
        if proc is None:
            return
        with _LOCK:
            _LIVE.pop(proc.pid, None)
        grace = STOP_GRACE_S if self.ready() else STARTING_GRACE_S
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                # the leader is gone; members it left behind get the same signal
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                break
            except subprocess.TimeoutExpired:
                continue
        proc.poll()  # reap the leader if it died before the signals
        for pid in session_members(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._pump is not None:
            self._pump.join(timeout=5.0)  # the log has all the server wrote (its pipe closed with its last process)

    def info(self) -> dict:
        return {"role": self.role, "url": self.url, "pid": self.pid, "startup_s": self.startup_s,
                "log": self.log_path.name}


def _copy_redacted(source, path: Path) -> None:
    """The server's output into its log, one redacted line at a time, until the pipe closes."""
    from ..redact import redact_text

    try:
        with source, open(path, "ab") as sink:
            for line in iter(source.readline, b""):
                sink.write(redact_text(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
                sink.flush()
    except (OSError, ValueError):  # the disk filled, or the pipe closed under us: the server runs on
        pass


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux ``/proc``: field 6 of ``/proc/PID/stat``); [] elsewhere."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != b"Z":
            out.append(int(name))
    return out


class ServerSet:
    """The servers of one backend: started on demand per role, all stopped on exit. At most
    ``max_servers`` alive in the process, over every set (the oldest server not asked for now
    is stopped to make room, whichever set holds it: the current baseline stays)."""

    def __init__(self, log_dir: Path, ready_timeout_s: float = 600.0, max_servers: int = 2,
                 health_path: str = "/health", port_args: tuple[str, ...] = ("--host", "{host}", "--port", "{port}")) -> None:
        self.log_dir = Path(log_dir)
        self.ready_timeout_s, self.max_servers = float(ready_timeout_s), int(max_servers)
        self.health_path, self.port_args = health_path, tuple(port_args)
        self.servers: dict[str, Server] = {}  # key -> server, oldest first
        self.starts: list[dict] = []  # every start: role, seconds to ready
        _SETS.add(self)

    def __enter__(self) -> "ServerSet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ensure(self, items: list[tuple[str, str, list[str]]]) -> list[Server]:
        """The servers for ``(key, role, argv)``: those not running are started together (in parallel)
        and waited for; returns them in order."""
        new = [(k, role, argv) for k, role, argv in items if not (k in self.servers and self.servers[k].alive())]
        for k, _, _ in new:  # a server that died (OOM-killed): its engine and worker processes go with it
            if k in self.servers:
                dead = self.servers.pop(k)
                log.warning("server %s (pid %s) died; stopping what it left and starting it again", dead.role, dead.pid)
                dead.stop()
        self._make_room(len(new), {k for k, _, _ in items})
        started = []
        try:
            for k, role, argv in new:
                self.servers.pop(k, None)
                server = Server(role, argv, self.log_dir / f"server-{role}.log", self.health_path, self.port_args)
                server.start()
                self.servers[k] = server
                started.append(server)
            for server in started:
                server.wait_ready(self.ready_timeout_s)
                self.starts.append({"role": server.role, "startup_s": server.startup_s})
        except BaseException:
            stop_servers(started)
            for k in [k for k, s in self.servers.items() if s in started]:
                self.servers.pop(k)
            raise
        return [self.servers[k] for k, _, _ in items]

    def _make_room(self, n_new: int, keep: set[str]) -> None:
        """Stop the oldest servers, of any set, until ``n_new`` more fit in ``max_servers`` (``keep``: this
        set's servers asked for now)."""
        while sum(len(s.servers) for s in list(_SETS)) + n_new > self.max_servers:
            held = [(srv.order, owner, k) for owner in list(_SETS) for k, srv in owner.servers.items()
                    if not (owner is self and k in keep)]
            if not held:
                return
            _, owner, k = min(held, key=lambda h: h[0])
            log.info("stopping server %s to make room (max_engines=%d alive)", owner.servers[k].role, self.max_servers)
            owner.servers.pop(k).stop()

    def pids(self) -> list[int]:
        return [s.pid for s in self.servers.values() if s.pid is not None]

    def close(self) -> None:
        servers = list(self.servers.values())
        self.servers.clear()
        stop_servers(servers)


def stop_servers(servers: list[Server]) -> None:
    """Stop ``servers`` at once, each on its own thread: the wait is the slowest one's grace, not the sum."""
    def stop(server: Server) -> None:
        try:
            server.stop()
        except Exception:  # noqa: BLE001 - best effort: the others are still stopped
            log.exception("stopping server %s", server.role)

    threads = []
    for server in servers:
        thread = threading.Thread(target=stop, args=(server,), name=f"server-stop-{server.role}", daemon=True)
        try:
            thread.start()
            threads.append(thread)
        except RuntimeError:  # no new thread at interpreter shutdown (atexit on newer Pythons): one after another
            stop(server)
    for thread in threads:
        thread.join()


def stop_all() -> None:
    """Stop every server this process started (atexit, signal handlers)."""
    with _LOCK:
        live = list(_LIVE.values())
    stop_servers(live)


def _install_handlers() -> None:
    """Once per process: stop the servers at exit and on SIGTERM / SIGHUP (then die as the signal asks)."""
    if _INSTALLED[0]:
        return
    _INSTALLED[0] = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)

        def handler(signum, frame, previous=previous):
            stop_all()
            if callable(previous):
                previous(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


def child_env() -> dict[str, str]:
    """This process's environment less what the harness set for engines stepped in this process
    (``backends.vllm.stepped``): a server runs its engine as vLLM would by default."""
    from .vllm.stepped import harness_env

    ours = harness_env()
    return {k: v for k, v in os.environ.items() if ours.get(k) != v}
