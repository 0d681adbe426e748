"""Hydra callbacks (the edge): registered in ``conf/config.yaml`` under ``hydra.callbacks``.

``SweepGate`` runs in the launching process around a multirun, whatever the launcher
(in-process, submitit local, Slurm):

* ``on_multirun_start`` checks every job before the first one starts (``run.sweeps.check_jobs``:
  each job composed as the launcher will, then the validation pass that needs no weights); a
  problem in any job refuses the whole sweep (exit 2, nothing measured, nothing written).
  It then resolves ``run_id`` once, before any job is launched. Hydra copies
  the primary config's resolver cache into every job's config (and submitit pickles it
  with the launcher), so ``${now:...}`` gives every job the same ``run_id`` and all jobs
  write into one results folder, even when they start minutes later on other machines.
  On Slurm it makes submitit read job states from ``squeue`` when ``sacct`` is off
  (``speedbench.launchers.slurm_states``).
* ``on_multirun_end`` applies ``sweep.allowed_failure_frac`` to the whole sweep, reading
  the cells all jobs wrote; ``speedbench run`` turns the verdict into its exit code.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..results.layout import RunFolder
from . import verdict as verdicts
from .sweeps import SweepChecked, SweepRefused, check_jobs, job_overrides

log = logging.getLogger(__name__)


@dataclass
class SweepState:
    """What ``speedbench run`` tells the callback (Hydra builds it from the config, so it cannot be
    handed arguments) and what the callback hands back. It lives for one invocation: :func:`start`
    sets it, :func:`finish` takes the verdict and clears it, so a second run in the same process
    starts from nothing."""

    check_only: bool = False
    verdict: verdicts.Verdict | None = None


STATE = SweepState()


def start(check_only: bool) -> None:
    """Before an invocation: forget the last sweep's verdict; ``--check``: a multirun stops after
    every job passed the checks."""
    STATE.check_only, STATE.verdict = check_only, None


def finish() -> verdicts.Verdict | None:
    """The verdict of the multirun that just ended in this process; the state is cleared."""
    found = STATE.verdict
    STATE.check_only, STATE.verdict = False, None
    return found


class SweepGate(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ..config import ConfigError
        from ..console import release_stderr

        jobs = job_overrides(config)
        problems = check_jobs(config, jobs)
        slurm = str(config.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher")
        if slurm:
            from ..slurm import fit_problems

            problems += fit_problems(config.hydra.launcher)  # a job no node can run would pend forever
        if problems:
            raise SweepRefused(ConfigError(problems))
        if STATE.check_only:
            raise SweepChecked(len(jobs))
        if slurm:
            from ..launchers.slurm_states import install_watcher

            install_watcher()  # job states from squeue where sacct is off (one line, not one per poll)
        release_stderr()  # composition succeeded: the launcher's messages may pass
        log.info("sweep run_id: %s", config.run_id)  # resolving it here pins it for every job

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from ..redact import redact_tree

        folder = RunFolder.of(config.results_dir, config.run_id)
        redact_tree(folder.hydra_dir)  # multirun.yaml and every job's Hydra files, as the jobs left them
        STATE.verdict = verdicts.of_folder(folder.root, float(config.sweep.allowed_failure_frac))
        log.debug(STATE.verdict.message())  # `speedbench run` prints it once, after the sweep's table
