"""Hydra's submitit launchers (``hydra/launcher=local|slurm``), stoppable and without secrets on disk.

Both (``hydra_plugins.speedbench_launchers``: Hydra takes launchers only from there) are the
hydra-submitit-launcher plugin's launchers with :class:`Stoppable`'s ``launch``, which takes care
of two faults (the job side, ``__call__``, is the plugin's own, after registering the package's resolvers):

* Stopping a sweep stops its jobs. While the launching process waits for its jobs, SIGTERM and
  SIGINT cancel every job it submitted through submitit's job objects
  (``Job.cancel``: a local job's controller gets SIGINT and stops its task, SIGKILL after 1 s;
  a Slurm job is ``scancel``-ed), wait (bounded) until the local ones have exited, and end the
  launcher with exit status 128 + the signal (:class:`SweepStopped`).
* No pickle of the run's config (secrets included) stays under the results folder. The local
  launcher keeps submitit's folder in a private temporary folder (mode 0700) and copies only
  the jobs' logs, redacted, into ``submitit_folder`` when the sweep ends, then removes it. A
  Slurm sweep needs a folder the compute nodes share, so its pickles stay in ``submitit_folder``
  (created mode 0700) while the jobs run and are deleted when the sweep ends.
"""
from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence


log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # not SIGHUP: a closed login shell leaves a Slurm sweep running
STOP_WAIT_S = 30.0  # how long a stopped sweep waits for its local jobs to exit


class SweepStopped(BaseException):
    """The launching process got a stop signal; its jobs were cancelled. ``speedbench run`` exits
    128 + ``signum``. A ``BaseException``: Hydra must not turn it into a failed job and go on."""

    def __init__(self, signum: int, n_jobs: int) -> None:
        super().__init__(f"sweep stopped by {signal.Signals(signum).name}: {n_jobs} job(s) cancelled")
        self.signum = signum


class Stoppable:
    """``launch`` for both executors: submit, wait, cancel everything on a stop signal."""

    _EXECUTOR: str
    params: dict
    config: Any

    def _submitit_folder(self) -> tuple[str, Path | None]:
        """The folder submitit writes into, and the private one to remove afterwards (local only)."""
        if self._EXECUTOR != "local":
            Path(str(self.params["submitit_folder"]).split("%j")[0]).mkdir(mode=0o700, parents=True, exist_ok=True)
            return str(self.params["submitit_folder"]), None
        private = Path(tempfile.mkdtemp(prefix="speedbench-submitit-"))  # mode 0700
        return str(private / "%j"), private

    def _executor(self, folder: str):
        import submitit

        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        own = {"submitit_folder", "max_num_timeout"}
        init = {f"{self._EXECUTOR}_max_num_timeout": self.params["max_num_timeout"]} if "max_num_timeout" in self.params else {}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=folder, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in shared else f"{self._EXECUTOR}_{k}": v
                                      for k, v in self.params.items() if k not in own})
        return executor

    def __call__(self, *args, **kwargs):
        """The job side (in the job's own process): the package's resolvers first, since the job's
        Hydra resolves ``hydra.sweep.dir`` (``${sb_run_dir:...}``) there; then the plugin's job."""
        from ..config.hydra import register_resolvers

        register_resolvers()
        return super().__call__(*args, **kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int):
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides

        from ..redact import redact_text, redact_tree

        folder, private = self._submitit_folder()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")
        calls = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {redact_text(' '.join(filter_overrides(overrides)))}")
            calls.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs: list = []
        try:
            with _stop_signals(jobs) as stop:
                with _stderr_to(private / "controllers.log" if private else None):  # a cancelled controller's traceback
                    jobs.extend(self._executor(folder).map_array(self, *zip(*calls)))
                stop.arm()  # a signal during the submission acts now, when every job is known
                return [job.results()[0] for job in jobs]
        finally:
            _forget_pickles(jobs, private, str(self.params["submitit_folder"]))
            redact_tree(sweep_dir)  # multirun.yaml and the jobs' Hydra files, also when stopped before a job ran


class _StopRequested(BaseException):
    def __init__(self, signum: int) -> None:
        self.signum = signum


class _stop_signals:
    """While the block runs, a stop signal cancels ``jobs`` and raises :class:`SweepStopped`."""

    def __init__(self, jobs: list) -> None:
        self.jobs, self.saved = jobs, {}
        self.armed, self.pending = False, None

    def _handler(self, signum, frame) -> None:
        if not self.armed:  # still submitting: the job list is not known yet
            self.pending = signum
            return
        raise _StopRequested(signum)

    def arm(self) -> None:
        self.armed = True
        if self.pending is not None:
            raise _StopRequested(self.pending)

    def __enter__(self):
        for sig in STOP_SIGNALS:
            self.saved[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if isinstance(exc, _StopRequested):
            for sig in STOP_SIGNALS:  # a second signal while cancelling must not cut the cleanup short
                signal.signal(sig, signal.SIG_IGN)
            try:
                cancel(self.jobs)
            finally:
                self._restore()
            raise SweepStopped(exc.signum, len(self.jobs)) from None
        self._restore()
        return False

    def _restore(self) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def cancel(jobs: list, wait_s: float = STOP_WAIT_S) -> None:
    """Cancel every job (submitit's ``Job.cancel``) and wait until the running ones are done."""
    for job in jobs:
        try:
            job.cancel(check=False)
        except Exception as exc:  # noqa: BLE001 - one job that cannot be cancelled must not keep the others
            log.warning("could not cancel job %s: %s", job.job_id, exc)
    deadline = time.monotonic() + wait_s
    pending = list(jobs)
    while pending and time.monotonic() < deadline:
        pending = [job for job in pending if not _done(job)]
        time.sleep(0.1)
    if pending:
        log.warning("%d job(s) still running %.0f s after cancelling: %s", len(pending), wait_s,
                    ", ".join(str(j.job_id) for j in pending))


def _done(job) -> bool:
    try:
        return job.done()
    except Exception:  # noqa: BLE001 - a scheduler that cannot say: count it as done, it was cancelled
        return True


def _forget_pickles(jobs: list, private: Path | None, folder: str) -> None:
    """Local: copy the jobs' logs (redacted) to ``folder``, remove the private folder. Slurm: delete
    the pickles in ``folder`` (its logs stay)."""
    from ..redact import redact_file

    if private is None:
        for job in jobs:
            for pickle in Path(str(job.paths.folder)).glob(f"{job.job_id}*.pkl"):
                pickle.unlink(missing_ok=True)
        return
    try:
        for job in jobs:
            src = Path(str(job.paths.folder))
            dst = Path(folder.replace("%j", str(job.job_id)))
            for log_file in list(src.glob("*.out")) + list(src.glob("*.err")):
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log_file, dst / log_file.name)
                redact_file(dst / log_file.name)
    except OSError as exc:
        log.warning("could not keep the sweep's job logs in %s: %s", folder, exc)
    finally:
        shutil.rmtree(private, ignore_errors=True)


class _stderr_to:
    """File descriptor 2 points at ``path`` while the block runs (processes started inside keep it)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.saved = path, None

    def __enter__(self):
        import os
        import sys

        if self.path is not None:
            sys.stderr.flush()
            self.saved = os.dup(2)
            with open(self.path, "ab") as sink:
                os.dup2(sink.fileno(), 2)
        return self

    def __exit__(self, *exc) -> bool:
        import os

        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
        return False

