"""The sweep as a whole: every job checked before the first one starts, one verdict at the end.

In a multirun every job measures its own cells, possibly in its own process (submitit,
Slurm), so no single job sees the whole sweep. Both checks below run in the launching
process: :func:`check_jobs` composes each job's configuration exactly as the launcher will
and runs the run-level validation pass on it (no model loads), so a bad value in the
seventh job is refused before the first job measures anything; the verdict
(:func:`speedbench.run.verdict.of_folder`) is computed once, after all jobs ended, from the
cells every job wrote into the shared results folder.
"""
from __future__ import annotations

from typing import Any


class SweepRefused(BaseException):
    """A sweep refused before any job ran; carries the :class:`~speedbench.config.ConfigError`.

    A ``BaseException`` on purpose: Hydra turns an ``Exception`` raised in a callback into a
    warning and carries on, and this must stop the sweep. ``speedbench run`` catches it.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class SweepChecked(BaseException):
    """``speedbench run --check -m``: every job passed the checks; the sweep stops before launching."""

    def __init__(self, n_jobs: int) -> None:
        super().__init__(f"{n_jobs} jobs checked")
        self.n_jobs = n_jobs


def job_overrides(config: Any) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper expands ``hydra.sweeper.params`` and the
    command line (the sweeper's own rule, one list per job, in launch order)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{key}={value}" for key, value in params.items()]
    arguments += [str(a) for a in config.hydra.overrides.task]
    loader = GlobalHydra.instance().hydra.config_loader if GlobalHydra.instance().is_initialized() else None
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def check_jobs(config: Any, jobs: list[list[str]]) -> list[str]:
    """Every problem of every job (``job_overrides(config)``) of the multirun ``config`` (empty: all may start).

    Each job is composed as the launcher composes it (the sweep's resolved values, such as
    ``run_id``, carried over) and goes through ``to_run_config`` and ``validation.prepare``:
    the same checks a job runs before its models load, none of which loads weights.
    """
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from ..backends.registry import schemas
    from ..config.hydra import to_run_config
    from ..pipeline import validation
    from .errors import refusal_lines

    loader = GlobalHydra.instance().hydra.config_loader
    problems: list[str] = []
    for number, overrides in enumerate(jobs):
        try:
            job = loader.load_sweep_config(config, list(overrides))
            with open_dict(job):  # what the launcher sets before a job runs
                job.hydra.job.num = number
                job.hydra.job.id = str(number)
            validation.prepare(to_run_config(job, schemas()))
        except Exception as exc:  # noqa: BLE001 - refusal_lines tells a refusal from a bug
            found = refusal_lines(exc)
            if found is None:
                raise
        else:
            continue
        label = f"job #{number} ({' '.join(overrides)})" if len(jobs) > 1 else f"job #{number}"
        problems += [f"{label}: {p}" for p in found]
    return problems
