"""The run folder: confined to ``results_dir``, writable, and one process per cell at a time.

* :func:`run_folder` refuses a ``run_id`` that is empty, absolute, has a path separator or
  ``..``, so nothing is written outside ``results_dir``; it is also the Hydra resolver
  ``sb_run_dir`` that ``conf/config.yaml`` builds Hydra's own output folders with, so Hydra
  writes nothing either when the run id is refused. ``latest`` is refused too: it is the name of
  the symlink to the newest run (``run.output.point_latest``), so a run named so would write into
  the previous run's folder.
* :func:`check_writable` proves the folder can take files before any model loads.
* :class:`CellLocks` takes an exclusive ``flock`` per cell to be measured
  (``<run>/.locks/<cell_id>.lock``, holding the pid): jobs of one sweep (disjoint cells) share
  a folder freely; a second process started on the same cells is refused before it loads a
  model, naming the process that holds them. The kernel releases a dead process's locks.
* :func:`clean_temp` removes the temporary files an interrupted write left behind.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from ..config import ConfigError
from .layout import LATEST, RunFolder

TEMP_GRACE_S = 300.0  # temp files of files shared by all jobs (the cell table) younger than this may be live


def check_run_id(run_id: str) -> None:
    text = str(run_id)
    if not text or text in (".", "..") or "/" in text or "\\" in text or "\0" in text or text.startswith("~") \
            or os.path.isabs(text) or text.strip() != text:
        raise ConfigError([f"run_id={text!r}: must be one folder name inside results_dir "
                           "(no '/', '\\', '..', leading '~' or absolute path)"])
    if text == LATEST:
        raise ConfigError([f"run_id={text!r}: reserved, it names the symlink to the newest run in results_dir; "
                           "choose another run_id"])


def run_folder(results_dir: str, run_id: str) -> str:
    """``results_dir/run_id``, refusing run ids that would leave ``results_dir``."""
    check_run_id(run_id)
    root = Path(str(results_dir)).expanduser()
    folder = root / str(run_id)
    if not folder.resolve().is_relative_to(root.resolve()):  # e.g. a symlink run folder pointing elsewhere
        raise ConfigError([f"run_id={run_id!r}: {folder} resolves outside results_dir={results_dir}"])
    return str(folder)


# ``${sb_run_dir:...}`` (conf/config.yaml's hydra.run.dir and sweep dir); registered by
# ``config.hydra.register_resolvers``, not on import.
RESOLVERS = {"sb_run_dir": run_folder}


def probe_writable(folder: Path) -> None:
    """Create ``folder`` and prove a file can be written in it (``OSError`` otherwise; as root,
    permission bits alone do not tell)."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-probe-{os.getpid()}.tmp"
    probe.write_bytes(b"ok")
    probe.unlink()


def check_writable(folder: Path) -> None:
    folder = Path(folder)
    try:
        probe_writable(folder)
    except OSError as exc:
        raise ConfigError([f"results folder {folder} is not writable: {exc.strerror or exc}"]) from exc


class CellLocks:
    """Exclusive locks on the cells this process is about to measure."""

    def __init__(self, root: Path) -> None:
        self.folder = RunFolder(root)
        self.dir = self.folder.locks_dir
        self._held: dict[str, int] = {}

    def acquire(self, cell_ids: list[str]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        busy: dict[str, str] = {}
        for cid in cell_ids:
            path = self.folder.lock_path(cid)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy[cid] = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._held[cid] = fd
        if busy:
            self.release()
            pids = sorted(set(busy.values()))
            raise ConfigError([
                f"{len(busy)} cell(s) of {self.dir.parent} are being measured right now by another speedbench "
                f"process (pid {', '.join(pids)}): {', '.join(sorted(busy)[:5])}{' ...' if len(busy) > 5 else ''}; "
                "refused so the two runs do not overwrite each other. Wait for it to finish (finished cells are "
                "then skipped on resume) or use another run_id"
            ])

    @property
    def held(self) -> list[str]:
        return sorted(self._held)

    def release(self) -> None:
        for fd in self._held.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._held.clear()


def clean_temp(root: Path, own_cells: list[str]) -> list[Path]:
    """Remove temp files left by interrupted writes: those of ``own_cells`` (locked by this process)
    and any older than ``TEMP_GRACE_S``. Returns what was removed."""
    removed = []
    now = time.time()
    own = tuple(f".{cid}." for cid in own_cells)
    for folder in RunFolder(root).written_dirs:
        if not folder.is_dir():
            continue
        for path in folder.glob(".*.tmp"):
            try:
                if path.name.startswith(own) or now - path.stat().st_mtime > TEMP_GRACE_S:
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue
    return removed


