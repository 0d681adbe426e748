"""``speedbench run``: compose ``conf/`` with the overrides, run every cell (Hydra; ``-m`` for a
sweep), turn what happened into one exit code and one summary (:mod:`.output`).

Exit codes: 0 done (failures within ``sweep.allowed_failure_frac``); 1 too many failed cells or a
sweep job that ended without a result; 2 refused (bad input, before any model loads where the
check allows it); 128+N a sweep stopped by signal N.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..console import UsageError, error_line, hold_stderr, release_stderr
from ..paths import conf_dir
from ..results.layout import RunFolder
from . import verdict as verdicts
from .argv import OwnOptions, hydra_error_line, is_multirun, split_run_argv
from .errors import RESULTS_FAULTS, REFUSALS, Refusals, composition_lines, refusal_text, unfinished_job


@dataclass
class Invocation:
    """What one ``speedbench run`` learnt while Hydra ran its app (nothing survives the call)."""

    own: OwnOptions
    refusals: Refusals
    code: int = 0
    root: Path | None = None  # the run folder, once the run got that far
    started: bool = False  # Hydra called the app: composition succeeded
    wandb_dir: Path | None = None
    verdict: verdicts.Verdict | None = None  # a single run's own verdict (a sweep's comes from callbacks)
    started_at: float = field(default_factory=time.time)  # cells written after this are this invocation's


def run_app(argv: list[str]) -> int:
    """``speedbench run``; with ``--json FILE`` a refused run (exit 2) still writes its summary there."""
    from . import output

    argv, own = split_run_argv(argv)
    state = Invocation(own, Refusals())
    code, reported = _launch(argv, state)
    if code == 2 and not reported and own.json:
        output.refused(own.json, state.refusals.last or "refused before anything ran")
    return code


def _refuse_run_ids(argv: list[str], refusals: Refusals) -> bool:
    """Refuse a ``run_id`` that leaves ``results_dir`` before Hydra creates any folder for it."""
    from ..config import ConfigError
    from ..results.runlock import check_run_id

    for arg in argv:
        name, _, value = arg.partition("=")
        if name.lstrip("+") == "run_id" and value and not value.startswith("${"):
            try:
                for one in value.split(",") if is_multirun(argv) else [value]:
                    check_run_id(one)
            except ConfigError as exc:
                refusals.say(str(exc), prefix="speedbench")
                return True
    return False


def _job(cfg, state: Invocation) -> None:
    """One run, or one job of a sweep: the body of the Hydra app."""
    from omegaconf import OmegaConf

    from .. import redact
    from ..backends.registry import schemas
    from ..config.hydra import to_run_config
    from ..loggers import build_logger
    from ..pipeline import runner, validation

    state.started = True
    release_stderr()
    composed = OmegaConf.to_container(cfg, resolve=True)  # the one read of Hydra's config: the rest reads this or the typed run
    redact.collect(composed)
    redact.install_log_filter()
    sys.argv[:] = redact.redact(list(sys.argv))  # what W&B and tracebacks record
    folder = RunFolder.of(composed["results_dir"], composed["run_id"])  # confined: Hydra's sb_run_dir resolved it
    fresh = folder.fresh
    redact.redact_tree(folder.hydra_dir)
    try:
        try:
            run = to_run_config(composed, schemas())
            if state.own.check:  # validation only: nothing loads, nothing is written
                prepared = validation.prepare(run)
                print(f"speedbench run --check: ok ({len(prepared.requests)} prompts; nothing loaded, nothing written)")
                if fresh:
                    _discard_hydra_output(folder)
                return
            state.root = RunFolder.of(run.results_dir, run.run_id).root
            if run.logger.name == "wandb" and run.logger.mode == "offline":  # where wandb puts offline runs
                from ..results.layout import wandb_dir

                state.wandb_dir = wandb_dir(run.logger.options.get("dir") or state.root)
            cells = runner.run_cells(run, progress=True, make_logger=build_logger)
        except REFUSALS as exc:
            state.refusals.say(refusal_text(exc))
            state.code = 2
            if isinstance(exc, RESULTS_FAULTS):
                state.root = None  # its table cannot be read or written: the one line is all
            if fresh and not folder.has_cells:
                _discard_hydra_output(folder)
            return
        if _is_multirun():  # one job of a sweep: callbacks.SweepGate judges the whole sweep
            return
        state.verdict = verdicts.of_statuses(state.root, [c.status for c in cells], run.sweep.allowed_failure_frac, "run")
        state.code = state.verdict.exit_code
    finally:
        redact.redact_tree(folder.hydra_dir)


def _launch(argv: list[str], state: Invocation) -> tuple[int, bool]:
    """Run the Hydra app; (exit code, whether the end-of-run summary was written)."""
    import hydra
    from hydra_plugins.speedbench_launchers import register_launchers

    from .. import redact
    from ..backends.registry import schemas
    from ..config.hydra import register_configs
    from . import callbacks

    config_dir = conf_dir()  # conf/ of a checkout, speedbench/conf of an installed wheel
    if not config_dir.is_dir():
        raise UsageError(f"config folder not found at {config_dir}: this installation lacks the shipped configs (rebuild the wheel)")
    if _refuse_run_ids(argv, state.refusals):
        return 2, False
    register_configs(schemas())  # and the resolvers conf/ uses
    if any(a.startswith(("hydra/launcher=", "+hydra/launcher=")) for a in argv):
        register_launchers()
    callbacks.start(state.own.check)
    redact.collect(list(argv))
    app = hydra.main(version_base="1.3", config_path=str(config_dir), config_name="config")(lambda cfg: _job(cfg, state))

    sys.argv = ["speedbench run", *argv]
    gate = hold_stderr()
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises what went wrong; _outcomes() makes it one line
    try:
        if "--help" in argv or "-h" in argv:
            _help(app)
        else:
            app()
    except BaseException as exc:  # noqa: BLE001 - each kind has its row in _outcomes(); the rest is raised
        code = _exit_code(exc, state, gate)
        if code is _RAISE:
            raise
        if code is not _FINISH:
            return code, False
    finally:
        from ..pipeline.runner import close_backends

        close_backends()  # engines stop in order (vLLM: no "engine core exited unexpectedly" at exit)
        swept = callbacks.finish()  # the invocation's state ends with it
        release_stderr()
        sys.stderr = gate.real
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return _finish(state, swept)


def _help(app) -> None:
    """Hydra's ``--help`` without the internal schema names among the groups' options."""
    import contextlib
    import io

    from ..config.hydra import hide_internal_help

    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            app()
    finally:
        sys.stdout.write(hide_internal_help(text.getvalue()))


_RAISE, _FINISH = object(), object()  # not ours to turn into a code; Hydra's normal exit (go on to the summary)


def _exit_code(exc: BaseException, state: Invocation, gate):
    """What ``app()`` raised as an exit code (the first row of :func:`_outcomes` that matches), after
    saying why in one line; ``_RAISE`` when no row takes it, ``_FINISH`` when the run ended normally."""
    for kinds, outcome in _outcomes():
        if isinstance(exc, kinds):
            return outcome(exc, state, gate)
    return _RAISE


def _outcomes():
    """(exception kinds, outcome) rows, first match wins: the exception-to-exit-code table of a run."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ..launchers.submitit import SweepStopped
    from .sweeps import SweepChecked, SweepRefused

    return (
        (SweepChecked, _checked),  # --check -m: every job passed, none was launched
        (SweepStopped, _stopped),  # SIGTERM/SIGINT to a submitit sweep: every job it launched was cancelled
        (SweepRefused, _sweep_refused),  # a job of the sweep failed the checks before any job started
        (SystemExit, _hydra_exit),  # Hydra reports a bad override or option itself, then exits
        ((OmegaConfBaseException, HydraException), _compose_error),  # raised as such (HYDRA_FULL_ERROR=1), sb_run_dir
        (Exception, _other_error),  # Hydra refuses a combination of its flags by raising
    )


def _checked(exc, state: Invocation, gate) -> int:
    sys.stderr = gate.real
    print(f"speedbench run --check: ok ({exc.n_jobs} jobs; nothing loaded, nothing written)")
    return 0


def _stopped(exc, state: Invocation, gate) -> int:
    sys.stderr = gate.real
    print(f"speedbench run: {exc}", file=sys.stderr)
    return 128 + exc.signum


def _sweep_refused(exc, state: Invocation, gate) -> int:
    sys.stderr = gate.real
    state.refusals.say(str(exc.error))
    return 2


def _refuse(state: Invocation, gate, line_of) -> int:
    """Refused before the app ran: stderr back, one line (``line_of(what stderr held)``), exit 2."""
    held = gate.take()
    sys.stderr = gate.real
    state.refusals.say(line_of(held))
    return 2


def _refused_by_hydra(exc, state: Invocation, gate) -> int:
    """The held stderr's last Hydra line, or the exception's own."""
    return _refuse(state, gate, lambda held: hydra_error_line(held) if held.strip() else error_line(exc))


def _hydra_exit(exc: SystemExit, state: Invocation, gate):
    if exc.code in (0, None):
        return _FINISH if state.started else 0  # --help, --cfg, --info exit 0 before the app
    if state.started:
        return int(exc.code) if isinstance(exc.code, int) else 1
    return _refuse(state, gate, hydra_error_line)  # Hydra printed why before exiting


def _compose_error(exc, state: Invocation, gate):
    from ..config import ConfigError

    if state.started:
        return _RAISE
    cause = exc
    while cause is not None and not isinstance(cause, ConfigError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return _refuse(state, gate, lambda held: str(cause))
    if (lines := composition_lines(exc, sys.argv[1:])) is not None:  # a group option, key or type the config does not have
        return _refuse(state, gate, lambda held: "\n".join(lines))
    return _refused_by_hydra(exc, state, gate)


def _other_error(exc, state: Invocation, gate):
    if state.started:
        return _RAISE
    if (unfinished := unfinished_job(exc)) is not None:  # a launched job ended without a result: not bad input
        sys.stderr = gate.real
        print(f"speedbench run: {unfinished}", file=sys.stderr)
        return 1
    return _refused_by_hydra(exc, state, gate)


def _finish(state: Invocation, sweep: verdicts.Verdict | None) -> tuple[int, bool]:
    """The exit code and the summary once Hydra returned (one run, or a whole multirun: ``sweep``)."""
    from . import output

    root = Path(sweep.root) if sweep is not None else state.root
    if root is None:
        return state.code, False
    code = sweep.exit_code if sweep is not None and state.code != 2 else state.code  # 2: bad input
    if code == 2 and not RunFolder(root).has_cells:
        return code, False  # refused before anything ran: the error said why, there is no table
    judged = sweep if sweep is not None else state.verdict
    if sweep is not None:
        message, ok = sweep.message(), sweep.ok
    else:  # a single run names its verdict only when it fails it
        message = judged.message() if judged is not None and not judged.ok and code != 2 else None
        ok = code == 0
    output.report(root, code=code, verdict=message, verdict_ok=ok, json_path=state.own.json, wandb_dir=state.wandb_dir,
                  wide=state.own.wide, since=state.started_at, error=state.refusals.last if code == 2 else None)
    return code, True


def _discard_hydra_output(folder: RunFolder) -> None:
    """A refused run writes nothing: remove the Hydra output this job created in a fresh run folder."""
    import shutil

    from hydra.core.hydra_config import HydraConfig

    out = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else folder.hydra_run_dir
    shutil.rmtree(out, ignore_errors=True)
    if _is_multirun():
        return
    for path in (folder.hydra_dir, folder.root):  # only when empty: never another run's files
        try:
            path.rmdir()
        except OSError:
            pass


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
