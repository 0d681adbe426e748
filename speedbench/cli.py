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
    "plan": ("speedbench.modelling.plan", "recommend D per batch size and mechanism from the cost model (no model run)"),
    "microbench": ("speedbench.modelling.microbench", "GEMM / attention / verification microbenchmarks into a results folder"),
    "round": ("speedbench.modelling.rounds", "explain one draft-and-verify round: tokens, costs, speedup"),
    "gate": ("speedbench.gate.cli", "compare a results folder with a baseline (AL, speedup); non-zero on regression"),
    "merge": ("speedbench.results.merge", "merge results folders (e.g. one per Slurm job) into one"),
    "wandb-log": ("speedbench.loggers.cli", "log an existing results folder to Weights & Biases"),
}


def run_app(argv: list[str]) -> int:
    """Compose conf/ with the overrides in argv and run every cell (Hydra; ``-m`` for sweeps)."""
    import hydra

    from .config import register_configs, to_run_config

    if not CONF_DIR.is_dir():
        print(f"speedbench: config folder not found at {CONF_DIR}; install the repository with `pip install -e .`", file=sys.stderr)
        return 2
    from .hydra_callbacks import clear_verdict, take_verdict

    register_configs()
    clear_verdict()
    status = {"code": 0}

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        from .pipeline import runner
        from .results.store import ResultsStore
        from .pipeline.summary import format_table

        run = to_run_config(cfg)
        cells = runner.run_cells(run, progress=True)
        store = ResultsStore(Path(run.results_dir) / run.run_id)
        table = store.cells()
        print(f"\nresults: {store.root}")
        print(format_table(table))
        if _is_multirun():  # one job of a sweep: hydra_callbacks.SweepGate judges the whole sweep
            return
        frac = runner.failure_fraction(cells)
        if frac > run.sweep.allowed_failure_frac:
            print(f"speedbench: {frac:.0%} of cells failed (allowed {run.sweep.allowed_failure_frac:.0%})", file=sys.stderr)
            status["code"] = 1

    sys.argv = ["speedbench run", *argv]
    app()
    verdict = take_verdict()  # a multirun: the failure fraction applies to the whole sweep
    if verdict is not None:
        print(verdict.message(), file=sys.stderr if not verdict.ok else sys.stdout)
        return verdict.exit_code
    return status["code"]


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
