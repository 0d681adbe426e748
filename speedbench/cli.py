"""``speedbench``: one entry point, one subcommand per job.

``speedbench run [hydra overrides] [-m]`` is the Hydra app; every other subcommand is a
module exposing ``add_cli_args(parser)`` and ``main(args)``, imported only when used.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from .console import UsageError, error_line, hold_stderr, quiet_third_party, release_stderr
from .paths import conf_dir

CONF_DIR = conf_dir()  # conf/ of a checkout, speedbench/conf of an installed wheel

# name -> (module, one-line help); each module has add_cli_args(parser) and main(args)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "fixtures": ("speedbench.fixtures.cli", "rebuild (train) or verify the embedded tiny models"),
    "data": ("speedbench.data.cli", "validate prompt files; build exact-length throughput splits"),
    "report": ("speedbench.report.cli", "render a results folder into report.md/.html mapped onto guidelines G1..G5 (docs/guidelines.md)"),
    "plan": ("speedbench.modelling.plan", "recommend D per batch size and mechanism from the cost model (no model run)"),
    "microbench": ("speedbench.modelling.microbench", "GEMM / attention / verification microbenchmarks into a results folder"),
    "round": ("speedbench.modelling.rounds", "explain one draft-and-verify round: tokens, costs, speedup"),
    "schedule": ("speedbench.schedule.cli", "pick the best D per load (batch size / concurrency) from a sweep; "
                 "write vLLM's num_speculative_tokens_per_batch_size; --verify a schedule against static D"),
    "gate": ("speedbench.gate.cli", "compare a results folder with a baseline (AL, speedup); non-zero on regression"),
    "merge": ("speedbench.results.merge", "merge results folders (e.g. one per Slurm job) into one"),
    "wandb-log": ("speedbench.loggers.cli", "log an existing results folder to Weights & Biases"),
}


# Hydra's own options that take a value (``-cd DIR``); everything else starting with ``-`` is a flag.
_HYDRA_VALUE_OPTIONS = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg",
                        "-p", "--package", "--experimental-rerun"}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def split_run_argv(argv: list[str]) -> tuple[list[str], dict]:
    """Speedbench's own ``run`` options out of argv, Hydra's options in front of the overrides.

    Hydra's parser takes its flags only before the overrides; speedbench builds Hydra's argv
    itself, so ``-m``, ``--config-dir DIR`` etc. may stand anywhere on the line.
    Own options: ``--json FILE`` (``-`` = stdout); ``--check`` (validate, load and run nothing).
    """
    options: list[str] = []
    overrides: list[str] = []
    own: dict = {"json": None, "check": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--check":
            own["check"], i = True, i + 1
            continue
        if arg == "--json" or arg.startswith("--json="):
            if arg == "--json":
                if i + 1 >= len(argv):
                    raise UsageError("--json needs a file name (or - for stdout)")
                own["json"], i = argv[i + 1], i + 2
            else:
                own["json"], i = arg.split("=", 1)[1], i + 1
            continue
        if arg == "--":
            overrides.extend(argv[i + 1:])
            break
        if arg.startswith("-") and len(arg) > 1:
            options.append(arg)
            takes = arg in _HYDRA_VALUE_OPTIONS or (arg in {"-i", "--info"} and i + 1 < len(argv) and argv[i + 1] in _INFO_CHOICES)
            if takes and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return options + overrides, own


_LAST_ERROR: list[str] = []  # the message of this invocation's refusal, for --json
_REPORTED: list[bool] = [False]


def _refuse(message: str, prefix: str = "speedbench run") -> None:
    """Print why ``speedbench run`` refused (redacted; one line per problem) and keep it for ``--json``."""
    from .redact import redact_text

    message = redact_text(message)
    print(f"{prefix}: {message}", file=sys.stderr)
    _LAST_ERROR[:] = [message]


def run_app(argv: list[str]) -> int:
    """``speedbench run``; with ``--json FILE`` a refused run (exit 2) still writes its summary there."""
    from . import run_output

    _LAST_ERROR.clear()
    _REPORTED[0] = False
    argv, own = split_run_argv(argv)
    code = _run_app(argv, own)
    if code == 2 and not _REPORTED[0] and own["json"]:
        run_output.refused(own["json"], _LAST_ERROR[-1] if _LAST_ERROR else "refused before anything ran")
    return code


def _run_app(argv: list[str], own: dict) -> int:
    """Compose conf/ with the overrides in argv (speedbench's own options already taken out, in
    ``own``) and run every cell (Hydra; ``-m`` for sweeps)."""
    import hydra

    from omegaconf import OmegaConf
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from . import redact
    from .backends.registry import schemas
    from .config import ConfigError
    from .config.hydra import omegaconf_line, register_configs, to_run_config
    from .results.runlock import check_run_id, register_resolver

    if not CONF_DIR.is_dir():
        raise UsageError(f"config folder not found at {CONF_DIR}: this installation lacks the shipped configs (rebuild the wheel)")
    from . import run_output
    from .hydra_callbacks import clear_verdict, set_check_only, take_verdict
    from .launchers import SweepStopped, register_launchers
    from .pipeline.sweeps import SweepChecked, SweepRefused, unfinished_job

    for arg in argv:  # refuse a run_id that leaves results_dir before Hydra creates any folder for it
        name, _, value = arg.partition("=")
        if name.lstrip("+") == "run_id" and value and not value.startswith("${"):
            try:
                for one in value.split(",") if "-m" in argv or "--multirun" in argv else [value]:
                    check_run_id(one)
            except ConfigError as exc:
                _refuse(str(exc), prefix="speedbench")
                return 2
    register_configs(schemas())
    register_resolver()
    if any(a.startswith(("hydra/launcher=", "+hydra/launcher=")) for a in argv):
        register_launchers()
    clear_verdict()
    set_check_only(own["check"])
    status = {"code": 0, "root": None, "started": False, "wandb_dir": None}
    redact.collect(list(argv))

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from .data.errors import DatasetError
        from .pipeline import runner, validation
        from .results.store import ResultsReadError, ResultsWriteError

        status["started"] = True
        release_stderr()
        redact.collect(OmegaConf.to_container(cfg, resolve=True))
        redact.install_log_filter()
        sys.argv[:] = redact.redact(list(sys.argv))  # what W&B and tracebacks record
        root = Path(str(cfg.results_dir)) / str(cfg.run_id)  # confined: Hydra's sb_run_dir resolved it
        fresh = not (root / "cells").exists() and not (root / "provenance.json").exists()
        redact.redact_tree(root / ".hydra")
        try:
            try:
                run = to_run_config(cfg, schemas())
                if own["check"]:  # validation only: nothing loads, nothing is written
                    prepared = validation.prepare(run)
                    print(f"speedbench run --check: ok ({len(prepared.requests)} prompts; nothing loaded, nothing written)")
                    if fresh:
                        _discard_hydra_output(root)
                    return
                status["root"] = Path(run.results_dir) / run.run_id
                if run.logger.name == "wandb" and run.logger.mode == "offline":  # where wandb puts offline runs
                    status["wandb_dir"] = Path(run.logger.options.get("dir") or status["root"]) / "wandb"
                cells = runner.run_cells(run, progress=True)
            except (ConfigError, DatasetError, OmegaConfBaseException) as exc:  # every problem, named
                text = omegaconf_line(exc) if isinstance(exc, OmegaConfBaseException) else str(exc)
                _refuse(text)
                status["code"] = 2
                if fresh:
                    _discard_hydra_output(root)
                return
            except (ValueError, UsageError, FileNotFoundError, ResultsWriteError) as exc:
                # cross-field checks, a backend refusing its options, a corrupt cell file, a full disk
                _refuse(error_line(exc))
                status["code"] = 2
                if isinstance(exc, (ResultsReadError, ResultsWriteError)):
                    status["root"] = None  # its table cannot be read or written: the one line is all
                if fresh and not (root / "cells").exists():
                    _discard_hydra_output(root)
                return
            if _is_multirun():  # one job of a sweep: hydra_callbacks.SweepGate judges the whole sweep
                return
            frac = runner.failure_fraction(cells)
            if frac > run.sweep.allowed_failure_frac:
                status["verdict"] = f"speedbench: {frac:.0%} of cells failed (allowed {run.sweep.allowed_failure_frac:.0%})"
                status["code"] = 1
        finally:
            redact.redact_tree(root / ".hydra")

    sys.argv = ["speedbench run", *argv]
    gate = hold_stderr()
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises what went wrong; the branches below make it one line
    try:
        app()
    except SweepChecked as exc:  # --check -m: every job passed, none was launched
        sys.stderr = gate.real
        print(f"speedbench run --check: ok ({exc.n_jobs} jobs; nothing loaded, nothing written)")
        return 0
    except SweepStopped as exc:  # SIGTERM/SIGINT to a submitit sweep: every job it launched was cancelled
        sys.stderr = gate.real
        print(f"speedbench run: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except SweepRefused as exc:  # a job of the sweep failed the checks before any job started
        sys.stderr = gate.real
        _refuse(str(exc.error))
        return 2
    except SystemExit as exc:  # Hydra reports a bad override or option itself, then exits
        if exc.code not in (0, None):
            if not status["started"]:
                held = gate.take()
                sys.stderr = gate.real
                _refuse(_hydra_error_line(held))
                return 2
            return int(exc.code) if isinstance(exc.code, int) else 1
        if not status["started"]:
            return 0  # --help, --cfg, --info
    except (OmegaConfBaseException, HydraException) as exc:  # compose errors raised as such (HYDRA_FULL_ERROR=1), sb_run_dir
        if status["started"]:
            raise
        held = gate.take()
        sys.stderr = gate.real
        cause = exc
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__cause__ or cause.__context__
        text = str(cause) if cause is not None else (_hydra_error_line(held) if held.strip() else error_line(exc))
        _refuse(text)
        return 2
    except Exception as exc:  # noqa: BLE001 - Hydra refuses a combination of its flags by raising
        if status["started"]:
            raise
        if (unfinished := unfinished_job(exc)) is not None:  # a launched job ended without a result: not bad input
            sys.stderr = gate.real
            print(f"speedbench run: {unfinished}", file=sys.stderr)
            return 1
        held = gate.take()
        sys.stderr = gate.real
        _refuse(error_line(exc) if not held.strip() else _hydra_error_line(held))
        return 2
    finally:
        from .pipeline.runner import close_backends

        close_backends()  # engines stop in order (vLLM: no "engine core exited unexpectedly" at exit)
        release_stderr()
        sys.stderr = gate.real
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    verdict = take_verdict()  # a multirun: the failure fraction applies to the whole sweep
    root = Path(verdict.root) if verdict is not None else status["root"]
    if root is None:
        return status["code"]
    code = verdict.exit_code if verdict is not None and status["code"] != 2 else status["code"]  # 2: bad input
    if code == 2 and not (root / "cells").is_dir():
        return code  # refused before anything ran: the error said why, there is no table
    message = verdict.message() if verdict is not None else status.get("verdict")
    ok = verdict.ok if verdict is not None else code == 0
    run_output.report(root, code=code, verdict=message, verdict_ok=ok, json_path=own["json"], wandb_dir=status["wandb_dir"])
    _REPORTED[0] = True
    return code


def _hydra_error_line(text: str) -> str:
    """One line from a Hydra/argparse error report."""
    lines = [ln.strip() for ln in text.splitlines()]
    for ln in lines:
        if " error: " in ln or ln.startswith("error:"):
            return ln.split("error:", 1)[1].strip()
    kept = []
    for ln in lines:
        if not ln or ln.startswith(("full_key", "object_type", "Set the environment variable HYDRA_FULL_ERROR")):
            if kept:
                break
            continue
        kept.append(ln)
    return " ".join(kept) or "invalid arguments (see speedbench run --help)"


def _discard_hydra_output(root: Path) -> None:
    """A refused run writes nothing: remove the Hydra output this job created in a fresh run folder."""
    import shutil

    from hydra.core.hydra_config import HydraConfig

    out = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else root / ".hydra" / "run"
    shutil.rmtree(out, ignore_errors=True)
    if _is_multirun():
        return
    for folder in (root / ".hydra", root):  # only when empty: never another run's files
        try:
            folder.rmdir()
        except OSError:
            pass


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _redacted_traceback(kind, value, tb) -> None:
    """``sys.excepthook``: an unexpected error's traceback, redacted (its messages may quote a secret)."""
    import traceback

    from .redact import redact_text

    sys.stderr.write(redact_text("".join(traceback.format_exception(kind, value, tb))))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sys.excepthook = _redacted_traceback
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_third_party()
    try:
        code = _dispatch(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except UsageError as exc:
        print(f"speedbench: {error_line(exc)}", file=sys.stderr)
        return 2
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:  # a path the user gave
        print(f"speedbench: {error_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `speedbench plan | head`: the reader left; not an error of ours
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - a results folder's fault, named in one line; anything else is a bug
        if not _results_fault(exc):
            raise
        print(f"speedbench: {error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speedbench: interrupted", file=sys.stderr)
        return 130


def _results_fault(exc: BaseException) -> bool:
    """A corrupt results file or a results folder that takes no files (``results.store``), for any command."""
    store = sys.modules.get("speedbench.results.store")  # imported by every command that reads results
    return store is not None and isinstance(exc, (store.ResultsReadError, store.ResultsWriteError))


def _silence_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors as one line (``prog: error: ...``) and exit 2; sub-parsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand but ``run`` (which Hydra parses)."""
    parser = OneLineParser(prog="speedbench", description="Benchmark speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a benchmark (Hydra overrides; -m for a sweep; --json FILE)", add_help=False)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_cli_args(p)
    return parser


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        return run_app(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 0 if argv == [] else 2
    return int(importlib.import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
