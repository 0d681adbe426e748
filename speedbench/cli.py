"""``speedbench``: one entry point, one subcommand per job.

``speedbench run [hydra overrides] [-m]`` is the Hydra app; every other subcommand is a
module exposing ``add_cli_args(parser)`` and ``main(args)``, imported only when used.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# name -> (module, one-line help); each module has add_cli_args(parser) and main(args)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "fixtures": ("speedbench.fixtures.cli", "rebuild (train) or verify the embedded tiny models"),
    "data": ("speedbench.data.cli", "validate prompt files; build exact-length throughput splits"),
    "report": ("speedbench.report.cli", "render a results folder into report.md/.html mapped onto guidelines G1..G5"),
    "plan": ("speedbench.plan", "recommend D per batch size and mechanism from the cost model (no model run)"),
    "microbench": ("speedbench.microbench", "GEMM / attention / verification microbenchmarks into a results folder"),
    "round": ("speedbench.round_explainer", "explain one draft-and-verify round: tokens, costs, speedup"),
    "gate": ("speedbench.gate", "compare a results folder with a baseline (AL, speedup); non-zero on regression"),
    "merge": ("speedbench.merge", "merge results folders (e.g. one per Slurm job) into one"),
    "wandb-log": ("speedbench.wandb_log", "log an existing results folder to Weights & Biases"),
}


def run_app(argv: list[str]) -> int:
    """Compose conf/ with the overrides in argv and run every cell (Hydra; ``-m`` for sweeps)."""
    import hydra

    from omegaconf import OmegaConf
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from . import redact
    from .config import register_configs, to_run_config
    from .runlock import check_run_id, register_resolver
    from .validation import ConfigError

    if not CONF_DIR.is_dir():
        print(f"speedbench: config folder not found at {CONF_DIR}; install the repository with `pip install -e .`", file=sys.stderr)
        return 2
    from .hydra_callbacks import clear_verdict, take_verdict

    for arg in argv:  # refuse a run_id that leaves results_dir before Hydra creates any folder for it
        name, _, value = arg.partition("=")
        if name.lstrip("+") == "run_id" and value and not value.startswith("${"):
            try:
                for one in value.split(",") if "-m" in argv or "--multirun" in argv else [value]:
                    check_run_id(one)
            except ConfigError as exc:
                print(f"speedbench: {exc}", file=sys.stderr)
                return 2
    register_configs()
    register_resolver()
    clear_verdict()
    status = {"code": 0, "started": False}
    redact.collect(list(argv))

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from omegaconf.errors import OmegaConfBaseException

        from . import runner
        from .data.errors import DatasetError
        from .results import ResultsStore
        from .summary import format_table

        status["started"] = True
        redact.collect(OmegaConf.to_container(cfg, resolve=True))
        redact.install_log_filter()
        sys.argv[:] = redact.redact(list(sys.argv))  # what W&B and tracebacks record
        root = Path(str(cfg.results_dir)) / str(cfg.run_id)  # confined: Hydra's sb_run_dir resolved it
        fresh = not (root / "cells").exists() and not (root / "provenance.json").exists()
        redact.redact_tree(root / ".hydra")
        try:
            try:
                run = to_run_config(cfg)
                cells = runner.run_cells(run, progress=True)
            except (ConfigError, DatasetError, OmegaConfBaseException) as exc:
                print(f"speedbench: {redact.redact_text(str(exc))}", file=sys.stderr)
                status["code"] = 2
                if fresh:
                    _discard_hydra_output(root)
                return
            except ValueError as exc:  # to_run_config's cross-field checks, a backend refusing its options
                print(f"speedbench: {redact.redact_text(str(exc))}", file=sys.stderr)
                status["code"] = 2
                if fresh and not (root / "cells").exists():
                    _discard_hydra_output(root)
                return
            store = ResultsStore(Path(run.results_dir) / run.run_id)
            table = store.cells()
            print(redact.redact_text(f"\nresults: {store.root}"))
            print(redact.redact_text(format_table(table)))
            if _is_multirun():  # one job of a sweep: hydra_callbacks.SweepGate judges the whole sweep
                return
            frac = runner.failure_fraction(cells)
            if frac > run.sweep.allowed_failure_frac:
                print(f"speedbench: {frac:.0%} of cells failed (allowed {run.sweep.allowed_failure_frac:.0%})", file=sys.stderr)
                status["code"] = 1
        finally:
            redact.redact_tree(root / ".hydra")

    sys.argv = ["speedbench run", *argv]
    try:
        app()
    except SystemExit as exc:  # Hydra reports compose errors (unknown key, bad type) and exits 1
        if not status["started"] and exc.code not in (0, None):
            return 2
        raise
    except (OmegaConfBaseException, HydraException) as exc:  # compose errors raised as such (HYDRA_FULL_ERROR=1), sb_run_dir
        if status["started"]:
            raise
        cause = exc
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__cause__ or cause.__context__
        text = str(cause) if cause is not None else "\n".join(
            str(e) for e in (exc, exc.__cause__) if e is not None and str(e))
        print(f"speedbench: {redact.redact_text(text)}", file=sys.stderr)
        return 2
    if status["code"] == 2:
        return 2
    verdict = take_verdict()  # a multirun: the failure fraction applies to the whole sweep
    if verdict is not None:
        print(verdict.message(), file=sys.stderr if not verdict.ok else sys.stdout)
        return verdict.exit_code
    return status["code"]


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] == "run":
        return run_app(argv[1:])
    parser = argparse.ArgumentParser(prog="speedbench", description="Benchmark speculative decoding.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a benchmark (Hydra overrides; -m for a sweep)", add_help=False)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_cli_args(p)
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 0 if argv == [] else 2
    return int(importlib.import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
