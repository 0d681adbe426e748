"""Why a run was refused: the one map from an exception to its lines (one run and every job of a sweep).

A refusal is bad input or a results folder that cannot be used: exit 2, before any model loads
where the check allows it, and nothing already measured is lost. Any other exception is a bug
and keeps its (redacted) traceback.
"""
from __future__ import annotations

import sys

from omegaconf.errors import OmegaConfBaseException

from ..config import ConfigError
from ..config.hydra import missing_option_lines, omegaconf_line
from ..console import UsageError, error_line
from ..data.errors import DatasetError
from ..results.store import ResultsReadError, ResultsWriteError

# every problem named (ConfigError lists them), a bad value OmegaConf found, a prompt file, cross-field checks,
# a backend refusing its options, a corrupt cell file, a full disk
REFUSALS: tuple[type[BaseException], ...] = (ConfigError, DatasetError, OmegaConfBaseException, ValueError, UsageError,
                                             FileNotFoundError, ResultsWriteError)
RESULTS_FAULTS = (ResultsReadError, ResultsWriteError)  # the folder's table cannot be read or written


def composition_lines(exc: BaseException, argv: list[str] | tuple[str, ...] = ()) -> list[str] | None:
    """Hydra's composition errors with the help its own text has or lacks: a group option that is not
    there (a did-you-mean and the group's options, :func:`~speedbench.config.hydra.missing_option_lines`),
    an override of a key the schema lacks (the closest key) or of the wrong type (the type expected);
    None for anything else."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    if isinstance(exc, MissingConfigException):
        return missing_option_lines(exc, argv) or [error_line(exc)]
    cause = exc.__cause__
    if isinstance(exc, ConfigCompositionException) and isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        return [omegaconf_line(cause)]
    return None


def refusal_lines(exc: BaseException) -> list[str] | None:
    """The lines that say why ``exc`` refused the run (None: ``exc`` is not a refusal)."""
    if (composed := composition_lines(exc)) is not None:  # one problem (a sweep's job list names one per line)
        return ["; ".join(line.strip() for line in composed)]
    if isinstance(exc, ConfigError):
        return list(exc.problems)
    if isinstance(exc, OmegaConfBaseException):
        return [omegaconf_line(exc)]
    if isinstance(exc, REFUSALS):
        return [error_line(exc)]
    return None


def refusal_text(exc: BaseException) -> str:
    """The message of a refusal as ``speedbench run`` prints it (a ConfigError's own text lists its problems)."""
    if isinstance(exc, (ConfigError, DatasetError)):
        return str(exc)
    lines = refusal_lines(exc)
    return lines[0] if lines else error_line(exc)


class Refusals:
    """What this invocation printed as its refusal (redacted), for ``--json``; one per invocation."""

    def __init__(self) -> None:
        self.last: str | None = None

    def say(self, message: str, prefix: str = "speedbench run") -> None:
        from ..redact import redact_text

        message = redact_text(message)
        print(f"{prefix}: {message}", file=sys.stderr)
        self.last = message


def unfinished_job(exc: BaseException) -> str | None:
    """The one line for submitit's "a job ended without a result" (``scancel``, a node failure,
    timed out too often), raised in the launching process; None for any other exception."""
    if type(exc).__name__ != "UncompletedJobError":
        return None
    lines = [line.strip() for line in str(exc).splitlines()[:2] if line.strip()]
    return (f"a job of the sweep ended without a result ({' '.join(lines) or 'no detail'}); "
            "rerun the same command to resume: finished cells are kept")
