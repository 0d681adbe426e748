"""Terminal vs CI output: progress bars, third-party log levels, one-line CLI errors.

* Progress bars are drawn only when stderr is a terminal. ``SPEEDBENCH_PROGRESS=1|0`` (or the
  run key ``progress: true|false``) forces them on or off; ``TQDM_DISABLE=1``, ``CI=...`` and
  ``TERM=dumb`` turn them off, as in most command-line tools.
* Libraries that log every request or every engine step (httpx, vLLM, urllib3, the hub
  client, ...) are held at WARNING; ``SPEEDBENCH_LOG_LEVEL=INFO|DEBUG`` lets them through.
* A usage error is one line on stderr and exit status 2 (:class:`UsageError`).
* Where no bars are drawn (output piped into a log), a long run says what it is doing at least
  every 30 s (:class:`Heartbeat`; ``SPEEDBENCH_HEARTBEAT_S`` sets the interval, 0 turns it off).
* An engine's own console output (vLLM's engine process: profiler tables, per-step logs) goes
  to ``<run folder>/engine-logs/`` instead of the terminal or CI log.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
import sys
from pathlib import Path
from typing import Any

NOISY_LOGGERS = (
    "httpx", "httpcore", "urllib3", "huggingface_hub", "filelock", "fsspec", "datasets",
    "transformers", "vllm", "torch", "matplotlib", "PIL", "wandb", "asyncio", "submitit",
)
# third-party lines that say nothing to a user of speedbench (logger -> the line's text): vLLM's CPU build
# warns that its Triton lacks a CPU backend (it does not use it), that raw prompts are deprecated (the
# harness's own API use) and that the in-process engine keeps its thread binding (the harness set it)
IRRELEVANT = {
    "vllm.triton_utils.importing": "Triton is installed, but doesn't include CPU backend",
    "vllm.v1.engine.input_processor": "Passing raw prompts to InputProcessor is deprecated",
    "vllm.v1.worker.cpu_worker": "doesn't allow to use `torch.set_num_threads`",
}
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


class UsageError(Exception):
    """A problem with what the user asked for: reported as one line, exit status 2."""


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else ""
    return True if text in TRUE else False if text in FALSE else None


def progress_enabled(setting: Any = "auto", stream: Any = None) -> bool:
    """Whether to draw progress bars. ``setting``: ``true``/``false`` or ``auto`` (the default)."""
    forced = _flag(os.environ.get("SPEEDBENCH_PROGRESS"))
    if forced is not None:
        return forced
    chosen = _flag(setting)
    if chosen is not None:
        return chosen
    if _flag(os.environ.get("TQDM_DISABLE")) or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


HEARTBEAT_S = 30.0  # the longest silence of a run whose output is piped (SPEEDBENCH_HEARTBEAT_S)


def heartbeat_interval() -> float:
    """Seconds between heartbeat lines: ``SPEEDBENCH_HEARTBEAT_S`` (0 or less: none), else 30."""
    text = os.environ.get("SPEEDBENCH_HEARTBEAT_S", "").strip()
    if not text:
        return HEARTBEAT_S
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"SPEEDBENCH_HEARTBEAT_S={text!r}: expected a number of seconds (0: no heartbeat)") from None


class Heartbeat:
    """A line on ``stream`` (stderr) every ``interval`` seconds while a phase runs: what it is doing
    (``phase``), how far it got (``detail``) and the time since it started, so a log of a piped
    run is never silent for longer than the interval. Off (no thread) when ``interval`` <= 0."""

    def __init__(self, interval: float, prefix: str = "speedbench run", stream: Any = None) -> None:
        import threading

        self.interval, self.prefix, self.stream = float(interval), prefix, stream
        self.phase_text, self.detail = "starting", ""
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._beat, name="speedbench-heartbeat", daemon=True)
            self._thread.start()

    def phase(self, text: str, detail: str = "") -> None:
        self.phase_text, self.detail = text, detail

    def line(self) -> str:
        elapsed = int(time.monotonic() - self._started)
        clock = f"{elapsed // 60}m{elapsed % 60:02d}s" if elapsed >= 60 else f"{elapsed}s"
        return (f"{self.prefix}: [{clock}] {self.phase_text}"
                + (f": {self.detail}" if self.detail else ""))

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            stream = self.stream if self.stream is not None else sys.stderr
            try:
                print(self.line(), file=stream, flush=True)
            except (OSError, ValueError):  # a closed pipe: nothing to tell
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def log_level() -> int:
    name = os.environ.get("SPEEDBENCH_LOG_LEVEL", "").strip().upper()
    level = logging.getLevelName(name) if name else None
    return level if isinstance(level, int) else logging.WARNING


def quiet_third_party() -> None:
    """Hold chatty libraries at WARNING (or ``SPEEDBENCH_LOG_LEVEL``); set before they load."""
    level = log_level()
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if not os.environ.get("SPEEDBENCH_LOG_LEVEL"):  # asked for: every line stays
        for name, text in IRRELEVANT.items():
            logger = logging.getLogger(name)
            if not any(isinstance(f, _Drop) for f in logger.filters):
                logger.addFilter(_Drop(text))
        # vLLM's kernel scan touches torch.distributed.reduce_op at every engine start, which warns
        warnings.filterwarnings("ignore", message=r"`torch\.distributed\.reduce_op` is deprecated", category=FutureWarning)
    # vLLM configures its own handlers from these variables when it is imported.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", logging.getLevelName(level))
    asked = bool(os.environ.get("SPEEDBENCH_LOG_LEVEL"))  # by default transformers' advice lines stay out too
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", logging.getLevelName(level).lower() if asked else "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1" if not progress_enabled() else "0")


class _Drop(logging.Filter):
    """Drops the records whose message contains ``text`` (``IRRELEVANT``)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in str(record.msg)


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str | None:
    """The closest of ``choices`` to a misspelt ``word`` (difflib's ratio at least ``cutoff``), or None."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=cutoff)
    return close[0] if close else None


def error_line(exc: BaseException) -> str:
    """The first line of an exception's message (with its type when the message is empty); an
    ``OSError`` about a path names the path and what the system said (:func:`path_error_line`)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return path_error_line(exc)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def path_error_line(exc: OSError) -> str:
    """``cannot use PATH: REASON`` for an ``OSError`` about a path (a read-only mount, a name over
    NAME_MAX, a symlink loop, a missing folder): the one line the CLI prints for any of them."""
    path = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        path += f" -> {os.fsdecode(exc.filename2)}"
    reason = exc.strerror or type(exc).__name__
    return f"cannot use {path}: {reason}"


@contextlib.contextmanager
def stdout_fd_to(path: Path | None, fds: tuple[int, ...] = (1,)):
    """Point file descriptor 1 (and the other ``fds``: 2 for an engine started in this process,
    whose native code writes its start-up notes to stderr) at ``path`` while the block runs;
    processes started inside keep it (vLLM's engine process prints its profiler tables and
    per-step logs there). ``None``: leave them alone. An exception still reaches the caller."""
    if path is None:
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved = {fd: os.dup(fd) for fd in fds}
    except OSError:  # no such fd (embedded interpreters): nothing to redirect
        yield
        return
    with open(path, "ab") as sink:
        for fd in fds:
            os.dup2(sink.fileno(), fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def engine_log(results_root: Path, name: str) -> Path | None:
    """Where an engine's own output goes: ``<run folder>/engine-logs/<name>.log``, unless
    ``SPEEDBENCH_LOG_LEVEL`` asks for INFO or DEBUG (then it stays on the terminal)."""
    if log_level() < logging.WARNING:
        return None
    from .results.layout import RunFolder

    return RunFolder(results_root).engine_log_path(name)


class HeldStderr:
    """stderr that holds what is written until released (so Hydra's multi-line error reports can
    become one line), then passes everything through, redacted (Hydra's own lines quote the
    overrides: a sweep's ``#0 : ...`` list, "Error executing job with overrides: [...]")."""

    def __init__(self, real) -> None:
        self.real = real
        self._held: list[str] | None = []

    def write(self, text: str) -> int:
        if self._held is None:
            from .redact import redact_text

            self.real.write(redact_text(text))
            return len(text)
        self._held.append(text)
        return len(text)

    def take(self) -> str:
        text = "".join(self._held or [])
        self._held = None
        return text

    def release(self) -> None:
        if self._held is not None:
            from .redact import redact_text

            self.real.write(redact_text(self.take()))

    def __getattr__(self, name: str):
        return getattr(self.real, name)


_HELD: list[HeldStderr] = []


def hold_stderr() -> HeldStderr:
    """Replace ``sys.stderr`` with a :class:`HeldStderr` until :func:`release_stderr`."""
    held = HeldStderr(sys.stderr)
    _HELD[:] = [held]
    sys.stderr = held
    return held


def release_stderr() -> None:
    """Let held stderr through (the run has started: composition succeeded). No-op elsewhere,
    e.g. in a sweep job's own process."""
    for held in _HELD:
        held.release()
    _HELD.clear()
