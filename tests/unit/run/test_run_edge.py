"""The run edge (speedbench/run/): one failure verdict for a run and a sweep, one refusal map,
cli.py importing only the subcommand it dispatches to, every run-folder path from RunFolder."""
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from speedbench.config import ConfigError
from speedbench.records import STATUS_FAILED, STATUS_OK
from speedbench.results.layout import RunFolder
from speedbench.run import errors, verdict
from tests.support.sweep_helpers import make_run, subprocess_env


def test_one_verdict_rule_for_a_run_and_a_sweep(tmp_path):
    statuses = [STATUS_OK, STATUS_FAILED, STATUS_OK, STATUS_OK]
    run = verdict.of_statuses(tmp_path, statuses, 0.2, "run")
    assert (run.n_cells, run.n_failed, run.ok, run.exit_code) == (4, 1, False, 1)
    assert run.message() == f"run {tmp_path}: 1 of 4 cells failed (25%), beyond sweep.allowed_failure_frac=0.2"
    assert verdict.of_statuses(tmp_path, statuses, 0.25, "sweep").exit_code == 0  # at the bound: within
    assert verdict.of_statuses(tmp_path, [], 0.0, "run").ok  # no cells: nothing failed
    assert verdict.of_folder(tmp_path, 0.0).n_cells == 0  # an empty folder reads as no cells


def test_one_map_from_an_exception_to_a_refusal():
    assert errors.refusal_lines(ConfigError(["a: bad", "b: worse"])) == ["a: bad", "b: worse"]
    with pytest.raises(OmegaConfBaseException) as bad:
        OmegaConf.create({"x": 1}).nope  # noqa: B018 - an OmegaConf error with a key
    (line,) = errors.refusal_lines(bad.value)
    assert "\n" not in line
    assert errors.refusal_lines(FileNotFoundError("prompts.jsonl: no such file\ndetail")) == ["prompts.jsonl: no such file"]
    assert errors.refusal_lines(RuntimeError("a bug")) is None  # not a refusal: keeps its traceback
    assert errors.refusal_text(ConfigError(["a: bad", "b: worse"])) == str(ConfigError(["a: bad", "b: worse"]))


@pytest.mark.parametrize("argv", [["report", "--help"], ["--help"], ["gate", "--help"]])
def test_a_subcommand_imports_neither_the_others_nor_the_engines(argv):
    """Before the split build_parser imported every subcommand: `report --help` loaded
    fixtures/train (which sets OMP_WAIT_POLICY) and torch."""
    code = ("import os, sys\nfrom speedbench import cli\n"
            f"try:\n    cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('speedbench.fixtures.train', 'torch', 'vllm', 'speedbench.run.app') if m in sys.modules]\n"
            "print('LOADED', bad, os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in subprocess_env().items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    assert "usage: speedbench" in out
    assert out.strip().endswith("LOADED [] None")


def test_the_store_writes_where_run_folder_says(tmp_path):
    from speedbench.pipeline import runner

    run = make_run(tmp_path, "paths", categories=("coding",), max_new_tokens=4, warmup_batches=0)
    (cell,) = runner.run_cells(run, progress=False)
    folder = RunFolder.of(tmp_path, "paths")
    assert folder.cell_paths() == [folder.cell_path(cell.cell_id)]
    assert folder.requests_path(cell.cell_id).is_file() and folder.steps_path(cell.cell_id).is_file()
    assert all(folder.table_path(fmt).is_file() for fmt in ("parquet", "csv", "jsonl"))
    assert folder.provenance_path.is_file() and folder.lock_path(cell.cell_id).is_file()
    assert folder.has_cells and not folder.fresh
    assert sorted(p.name for p in tmp_path.joinpath("paths").iterdir() if not p.name.startswith(".tmp")) == sorted(
        [folder.cells_dir.name, folder.requests_dir.name, folder.steps_dir.name, folder.provenance_path.name,
         folder.locks_dir.name, *(folder.table_path(f).name for f in ("parquet", "csv", "jsonl"))])


def test_what_the_hydra_app_raises_maps_to_an_exit_code_by_one_table(capsys):
    """run/app.py's _outcomes: each kind its row, first match wins; what no row takes is raised."""
    import signal

    from speedbench.console import hold_stderr, release_stderr
    from speedbench.launchers.submitit import SweepStopped
    from speedbench.run import app
    from speedbench.run.argv import OwnOptions
    from speedbench.run.errors import Refusals
    from speedbench.run.sweeps import SweepChecked

    def code(exc, started=False):
        state = app.Invocation(OwnOptions(), Refusals(), started=started)
        gate = hold_stderr()
        try:
            return app._exit_code(exc, state, gate), state.refusals.last
        finally:
            release_stderr()

    assert code(SweepChecked(3))[0] == 0
    assert code(SweepStopped(signal.SIGTERM, 2))[0] == 128 + signal.SIGTERM
    assert code(SystemExit(0)) == (0, None) and code(SystemExit(0), started=True)[0] is app._FINISH
    assert code(SystemExit(3), started=True)[0] == 3
    assert code(ValueError("bad: flag"))[0] == 2
    assert code(ValueError("bad"), started=True)[0] is app._RAISE  # a fault inside the run keeps its traceback
    assert code(KeyboardInterrupt())[0] is app._RAISE


SECOND_RUN_SCRIPT = r"""
import sys
from speedbench.pipeline import runner
from speedbench.run import callbacks
from speedbench.run.app import run_app

root = sys.argv[1]
small = ["backend=synthetic", "dataset=smoke", "dataset.categories=[coding]", "max_new_tokens=8", "warmup_batches=0",
         f"results_dir={root}", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
checked = run_app(["--check", "-m", "drafter.num_speculative_tokens=2,3", "run_id=checked", *small])
left = (dict(callbacks.STATE.__dict__), len(runner._BACKENDS))
ran = run_app(["-m", "drafter.num_speculative_tokens=2,3", "run_id=ran", *small])
single = run_app(["run_id=single", *small])
print("RESULT", checked, ran, single, left, len(runner._BACKENDS), callbacks.STATE.verdict)
"""


def test_a_second_invocation_in_one_process_sees_nothing_of_the_first(tmp_path):
    """What one ``speedbench run`` leaves in the process (the sweep callback's state, the engine cache)
    is reset or closed when it ends: a --check sweep, then a real sweep, then a single run, in one process."""
    proc = subprocess.run([sys.executable, "-c", SECOND_RUN_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    assert line == "RESULT 0 0 0 ({'check_only': False, 'verdict': None}, 0) 0 None", line
    assert not (tmp_path / "checked" / "cells").exists()  # --check measured nothing
    assert len(list((tmp_path / "ran" / "cells").glob("*.json"))) >= 2  # the sweep after it measured (not "checked")
    assert list((tmp_path / "single" / "cells").glob("*.json"))


def test_importing_the_package_registers_no_resolver():
    """Process-wide state comes from a call, not an import: the resolvers conf/ uses exist after
    ``register_resolvers()`` (which composing a config and a submitit job call), not before."""
    code = ("import speedbench.slurm, speedbench.results.runlock, speedbench.run.app, speedbench.run.callbacks\n"
            "from omegaconf import OmegaConf\n"
            "names = ('sb_run_dir', 'sb_slurm_gpus', 'sb_slurm_cpus', 'sb_slurm_mem_gb')\n"
            "print([OmegaConf.has_resolver(n) for n in names])\n"
            "from speedbench.config.hydra import register_resolvers\n"
            "register_resolvers()\n"
            "print([OmegaConf.has_resolver(n) for n in names])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[False, False, False, False]", "[True, True, True, True]"]
