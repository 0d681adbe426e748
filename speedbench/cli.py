"""``speedbench``: one entry point, one subcommand per job.

``speedbench run [hydra overrides] [-m]`` is the Hydra app (:mod:`speedbench.run`); every other
subcommand is a module exposing ``add_cli_args(parser)`` and ``main(args)``. This module only
dispatches: a subcommand's module is imported once argv names it, never for another command.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .console import UsageError, error_line, quiet_third_party
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
    "mechanisms": ("speedbench.report.mechanisms_cli", "the mechanism table of a results folder: inputs, generation "
                   "mode, memory, draft time per D, AL per category, training cost, best speedup per batch size"),
    "schedule": ("speedbench.schedule.cli", "pick the best D per load (batch size / concurrency) from a sweep; "
                 "write vLLM's num_speculative_tokens_per_batch_size; --verify a schedule against static D"),
    "capacity": ("speedbench.capacity.cli", "the highest request rate (or concurrency) each configuration sustains "
                 "within the SLO set, baseline and speculative, from a load sweep"),
    "gate": ("speedbench.gate.cli", "compare a results folder with a baseline (AL, speedup); non-zero on regression"),
    "history": ("speedbench.gate.history_cli", "change points across a series of gated runs (one per commit): where "
                "speedup or AL changed, by how much; non-zero on a loss beyond the tolerance"),
    "merge": ("speedbench.results.merge", "merge results folders (e.g. one per Slurm job) into one"),
    "import": ("speedbench.interop.import_cli", "turn other tools' baseline/speculative result files (vllm bench serve, "
               "AIPerf) into a results folder"),
    "export": ("speedbench.interop.export_cli", "write a results folder for other tools: SPEED-Bench run folders, "
               "InferenceX golden-AL YAML, a tidy CSV"),
    "wandb-log": ("speedbench.loggers.cli", "log an existing results folder to Weights & Biases"),
}


def run_app(argv: list[str]) -> int:
    """``speedbench run`` (:mod:`speedbench.run.app`, imported only for ``run``)."""
    from .run.app import run_app as run

    return run(argv)


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
    except BrokenPipeError:  # `speedbench plan | head`: the reader left; not an error of ours
        _silence_stdout()
        return 0
    except OSError as exc:  # a path that cannot be used, of any kind: one line naming it (console.path_error_line)
        print(f"speedbench: {error_line(exc)}", file=sys.stderr)
        return 2
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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand but ``run`` (which Hydra parses).

    ``only``: import just that subcommand's module for its options (the others are listed by
    name and help, not imported); ``""``: import none; None: all (the documented-commands test).
    """
    parser = OneLineParser(prog="speedbench", description="Benchmark speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a benchmark (Hydra overrides; -m for a sweep; --json FILE)", add_help=False)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        if only is None or only == name:
            importlib.import_module(module).add_cli_args(p)
    return parser


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        return run_app(argv[1:])
    parser = build_parser(only=argv[0] if argv and argv[0] in SUBCOMMANDS else "")
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 0 if argv == [] else 2
    return int(importlib.import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
