"""Sweeps in one process: models load once, failed cells are redone, the failure fraction
applies to the whole sweep, fault options keep cell ids, the Slurm launcher config is valid."""
import sys

import pytest

from speedbench import cli, models

from speedbench.pipeline import runner
from speedbench.pipeline import conversations
from speedbench.pipeline.cells import CellKey
from speedbench.results import ResultsStore
from speedbench.config import FaultConfig
from tests.support.sweep_helpers import make_run

QUIET = ["hydra/job_logging=disabled", "hydra/hydra_logging=disabled", "warmup_batches=0", "max_new_tokens=6"]


@pytest.fixture
def in_process(monkeypatch):
    """``speedbench run`` in this process (BasicLauncher), argv restored afterwards."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))

    def run(tmp_path, *overrides):
        return cli.main(["run", f"results_dir={tmp_path}", *QUIET, *overrides])

    return run


@pytest.fixture
def load_calls(monkeypatch):
    """Models actually built behind models.load_model's cache (its misses), caches emptied first."""
    calls: list[str] = []
    real = models._random_model

    def counting(preset, *args, **kwargs):
        calls.append(preset)
        return real(preset, *args, **kwargs)

    monkeypatch.setattr(models, "_random_model", counting)
    models.load_model.cache_clear()
    monkeypatch.setattr(runner, "_BACKENDS", {})
    return calls


def test_a_sweep_over_draft_lengths_loads_each_model_once(tmp_path, in_process, load_calls):
    rc = in_process(tmp_path, "run_id=once", "target.path=random:tiny-target", "drafter=tiny_draft",
                    "drafter.model=random:tiny-draft", "dataset=mini", "dataset.categories=[coding]", "dataset.n_requests=2",
                    "drafter.num_speculative_tokens=1,2,3", "-m")
    assert rc == 0
    cells = ResultsStore(tmp_path / "once").cells()
    assert sorted(cells.num_speculative_tokens) == [1, 2, 3] and (cells.status == "ok").all()
    assert load_calls.count("tiny-target") == 1
    assert load_calls.count("tiny-draft") == 1


def test_rerun_redoes_failed_cells_and_skips_finished_ones(tmp_path, monkeypatch):
    run = make_run(tmp_path, "redo", categories=("coding", "math"), max_new_tokens=8, warmup_batches=0)
    real = conversations.generate

    def math_breaks(backend, requests, spec):
        if requests[0].category == "math":
            raise RuntimeError("transient engine error")
        return real(backend, requests, spec)

    monkeypatch.setattr(conversations, "generate", math_breaks)
    first = {c.category: c for c in runner.run_cells(run, progress=False)}
    assert first["coding"].status == "ok" and first["math"].status == "failed"
    assert "transient engine error" in first["math"].error
    coding_file = tmp_path / "redo" / "cells" / f"{first['coding'].cell_id}.json"
    before = (coding_file.read_bytes(), coding_file.stat().st_mtime_ns)

    monkeypatch.setattr(conversations, "generate", real)
    second = runner.run_cells(run, progress=False)
    assert [(c.category, c.status) for c in second] == [("math", "ok")]  # only the failed cell ran again
    assert (coding_file.read_bytes(), coding_file.stat().st_mtime_ns) == before
    table = ResultsStore(tmp_path / "redo").cells()
    assert len(table) == 3 and table.cell_id.is_unique and (table.status == "ok").all()
    assert table.derived.sum() == 1  # the overall row, written once both categories finished
    assert runner.run_cells(run, progress=False) == []  # everything finished: nothing to do


def test_failure_fraction_applies_to_the_whole_sweep(tmp_path, in_process, capsys):
    # two jobs, one cell each; the second job's drafter cannot load: 1 of 2 cells fail.
    from tests.support.sweep_helpers import broken_model_dir

    broken = broken_model_dir(tmp_path)  # passes validation (configs only), fails when loaded
    sweep = ["run_id=frac", "drafter=tiny_draft", "dataset=mini", "dataset.categories=[coding]", "dataset.n_requests=2",
             f"drafter.model=builtin:tiny-draft-small,{broken}"]
    # per job, the broken job alone is 100% failed; over the sweep it is 50%
    assert in_process(tmp_path, *sweep, "sweep.allowed_failure_frac=0.5", "-m") == 0
    assert "1 of 2 cells failed (50%), within" in capsys.readouterr().out
    # rerun: the finished cell is skipped, the failed one redone (and fails again)
    assert in_process(tmp_path, *sweep, "sweep.allowed_failure_frac=0.25", "-m") == 1
    assert "1 of 2 cells failed (50%), beyond" in capsys.readouterr().err
    cells = ResultsStore(tmp_path / "frac").cells()
    assert sorted(cells.status) == ["failed", "ok"]


def test_a_bad_value_in_a_later_job_refuses_the_sweep_before_any_job_runs(tmp_path, in_process, capsys, load_calls):
    # job #0 is fine; job #1 (temperature -1) and job #2 (a drafter with another vocabulary) are not.
    # Each is named with its overrides, nothing is measured or written, and no model is built.
    sweep = ["run_id=upfront", "dataset=mini", "dataset.categories=[coding]", "dataset.n_requests=2", "-m",
             "sampling.temperature=0,-1"]
    assert in_process(tmp_path, *sweep) == 2
    err = capsys.readouterr().err
    assert "job #1 (" in err and "sampling.temperature=-1" in err and "must be a number in [0, inf]" in err
    assert "job #0" not in err
    assert not (tmp_path / "upfront").exists()
    assert load_calls == []
    vocab = ["run_id=vocab", "dataset=mini", "dataset.categories=[coding]", "dataset.n_requests=2", "-m",
             "drafter=tiny_draft", "drafter.model=builtin:tiny-draft-small,random:tiny"]
    assert in_process(tmp_path, *vocab) == 2
    err = capsys.readouterr().err
    assert "job #1 (" in err and "vocab" in err and "job #0" not in err
    assert not (tmp_path / "vocab").exists()


def test_sweep_job_list_follows_the_sweeper():
    """``job_overrides`` expands the sweep config's params and the command line as Hydra's basic
    sweeper does (the d_by_b grid times a command-line sweep)."""
    from omegaconf import OmegaConf

    from speedbench.run.sweeps import job_overrides

    grid = OmegaConf.load(cli.CONF_DIR / "sweep" / "d_by_b.yaml").hydra.sweeper.params
    cfg = OmegaConf.create({"hydra": {"sweeper": {"params": grid}, "overrides": {"task": ["sweep=d_by_b", "seed=0,1"]}}})
    jobs = job_overrides(cfg)
    assert len(jobs) == 4 * 2 * 2  # D in 1,2,4,6 x B in 1,4 x seed in 0,1
    assert len({tuple(j) for j in jobs}) == len(jobs)
    assert all("sweep=d_by_b" in j for j in jobs)
    assert {j[0] for j in jobs} == {f"drafter.num_speculative_tokens={d}" for d in (1, 2, 4, 6)}


def test_fault_injection_options_do_not_change_the_cell_id(tmp_path):
    plain = make_run(tmp_path, "x")
    slowed = make_run(tmp_path, "y", faults=FaultConfig(delay_ms=25))
    other = make_run(tmp_path, "z")
    other.drafter.engine_args = {"something_real": 1}
    key = lambda run: CellKey.for_run(run, "coding", "").cell_id  # noqa: E731
    assert key(plain) == key(slowed)  # run_id is not part of the id either
    assert key(plain) != key(other)


def test_slurm_launcher_config_makes_a_valid_sbatch_array(tmp_path, monkeypatch):
    """Compose hydra/launcher=slurm and let the plugin build its executor (with a stand-in
    ``srun`` so submitit accepts this machine); capture the sbatch script instead of submitting."""
    import submitit
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate
    from submitit.slurm import slurm

    from speedbench.backends.registry import schemas
    from speedbench.config.hydra import register_configs

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    GlobalHydra.instance().clear()
    register_configs(schemas())
    overrides = ["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "run_id=sl", "n_gpus=4", f"results_dir={tmp_path}"]
    with initialize_config_dir(config_dir=str(cli.CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.config = cfg

    class Captured(Exception):
        pass

    real = submitit.AutoExecutor

    def capturing(**kwargs):
        executor = real(**kwargs)

        def update_parameters(**params):
            real.update_parameters(executor, **params)  # submitit validates every key here
            script = slurm._make_sbatch_string(command="python -m speedbench.cli", folder=kwargs["folder"],
                                               map_count=40, **executor._executor.parameters)
            raise Captured(script)

        executor.update_parameters = update_parameters
        return executor

    monkeypatch.setattr(submitit, "AutoExecutor", capturing)
    with pytest.raises(Captured) as sbatch:
        launcher.launch([["drafter.num_speculative_tokens=1"]], 0)
    script = str(sbatch.value)
    for line in ("--partition=gpu", "--gpus-per-node=4", "--time=120", "--array=0-39%16", "--job-name=speedbench-sl",
                 "--ntasks-per-node=1"):
        assert line in script, line
    assert f"{tmp_path}/sl/.hydra/.submitit" in script  # job logs next to the results of the sweep
