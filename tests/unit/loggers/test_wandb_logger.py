"""logger=wandb, offline: one run per cell grouped by sweep, values equal to the cell table,
no secrets; `speedbench wandb-log` after the fact; the core never imports wandb otherwise."""
import math
import subprocess
import sys

import pytest

from speedbench import cli

from speedbench.pipeline import runner
from speedbench.config import LoggerConfig
from speedbench.loggers import build_logger
from speedbench.results import ResultsStore
from tests.support.sweep_helpers import make_run, subprocess_env
from tests.support.wandb_offline import offline_runs

SECRET = "sk-live-abcdefghijklmnop0123"


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb")
    run = make_run(root, "wb", categories=("coding", "math"), max_new_tokens=8, warmup_batches=0)
    run.logger = LoggerConfig(name="wandb", project="speedbench-test", mode="offline")
    run.drafter.engine_args = {"api_key": SECRET}
    runner.run_cells(run, progress=False, make_logger=build_logger)
    return root / "wb"


def test_each_cell_is_an_offline_run_with_the_cell_tables_values(logged):
    table = ResultsStore(logged).cells().set_index("cell_id")
    runs = offline_runs(logged)  # offline by default, inside the results folder
    assert len(runs) == len(table) == 3  # coding, math and the derived overall row (category=all)
    for wb in runs:
        cell = wb.config["cell"]
        row = table.loc[cell["cell_id"]]
        assert wb.group == "wb" and wb.job_type == "cell"
        assert set(wb.tags) == {"tiny", "ngram"}  # target, drafter, method
        for key in ("al", "speedup", "tpot_ms_baseline", "tpot_ms_spec", "acceptance_rate", "ttft_ms_spec", "n_requests"):
            assert wb.summary[key] == pytest.approx(row[key], rel=1e-12), key
        for k, p in enumerate(row["accepted_per_pos"], start=1):
            assert wb.summary[f"accepted_per_pos/{k}"] == pytest.approx(p)
        per_cat = wb.tables()["per_category"]
        cat_rows = [dict(zip(per_cat["columns"], r)) for r in per_cat["data"]]
        if row["derived"]:  # the overall row's table: one row per category cell it pools
            assert sorted(r["category"] for r in cat_rows) == ["coding", "math"]
            continue
        (cat_row,) = cat_rows
        assert cat_row["category"] == row["category"]
        assert cat_row["al"] == pytest.approx(row["al"]) and cat_row["n_requests"] == row["n_requests"]
        assert cat_row["speedup"] == pytest.approx(row["speedup"])
        assert len(wb.tables()["per_position"]["data"]) == 4  # D = 4
        assert wb.config["run"]["drafter"]["engine_args"]["api_key"] == "<redacted>"
    for path in logged.glob("wandb/offline-run-*/**/*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_wandb_log_after_the_fact_adds_the_sweep_run_with_report_plots(logged, tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (logged / "report").mkdir(exist_ok=True)
    fig = plt.figure(figsize=(1, 1))
    fig.savefig(logged / "report" / "pareto.png")
    plt.close(fig)
    out = tmp_path / "wandb-out"
    assert cli.main(["wandb-log", str(logged), "--dir", str(out)]) == 0
    assert "wandb sync" in capsys.readouterr().out
    runs = offline_runs(out)
    sweep = [r for r in runs if r.job_type == "sweep"]
    cells = [r for r in runs if r.job_type == "cell"]
    assert len(cells) == 3 and len(sweep) == 1
    assert {r.run_id for r in cells} == {r.run_id for r in offline_runs(logged)}  # same W&B run per cell
    assert sweep[0].summary["n_cells"] == 3 and sweep[0].group == "wb"
    assert [p.suffix for p in sweep[0].images()] == [".png"]
    assert len(sweep[0].tables()["cells"]["data"]) == 3


def test_logger_config_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="logger.mode"):
        build_logger(LoggerConfig(name="wandb", mode="sometimes"), tmp_path)
    with pytest.raises(KeyError, match="known: none, wandb"):
        build_logger(LoggerConfig(name="mlflow"), tmp_path)


def test_core_and_subcommands_do_not_import_wandb():
    code = (
        "import sys; import speedbench.pipeline.runner, speedbench.cli, speedbench.gate.cli, speedbench.results.merge, speedbench.loggers.cli;"
        "from speedbench.loggers import build_logger; from speedbench.config import LoggerConfig;"
        "build_logger(LoggerConfig(), '.'); sys.exit('wandb' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], env=subprocess_env(), timeout=120).returncode == 0


def test_nan_metrics_are_left_out_of_the_summary():
    from speedbench.loggers.payload import summary

    out = summary({"al": math.nan, "speedup": 1.5, "accepted_per_pos": [0.5, math.nan], "status": "ok", "cell_id": "x"})
    assert out == {"speedup": 1.5, "accepted_per_pos/1": 0.5}


def test_a_secret_in_a_wandb_setting_reaches_no_wandb_file(logged, tmp_path, monkeypatch, capsys):
    # +logger.options.entity=${oc.env:DB_PWD}: the setting is the environment secret's value; W&B wrote it to its
    # debug log and run file as it was handed over
    monkeypatch.setenv("DB_PWD", "DbPwdEntity-31xz")
    cell = ResultsStore(logged).cells()["cell_id"].iloc[0]
    assert cli.main(["wandb-log", str(logged), "--entity", "DbPwdEntity-31xz", "--dir", str(tmp_path),
                     "--cells", cell]) == 0
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and any(p.name.startswith("debug") for p in files), files
    for path in files:
        assert b"DbPwdEntity-31xz" not in path.read_bytes(), path
