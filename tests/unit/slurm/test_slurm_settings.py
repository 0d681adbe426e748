"""What a Slurm sweep asks for and records, without a cluster: the GPUs of a job (from the device
and ``n_gpus``), ``n_gpus=0`` on a CPU, and where a cell ran (the Slurm ids of the environment)."""
import shutil

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from speedbench import cli, slurm
from speedbench.backends.registry import schemas
from speedbench.config import BackendConfig
from speedbench.config.hydra import register_configs
from speedbench.pipeline import runner, validation

from tests.support.sweep_helpers import make_run


def _launcher(*overrides):
    GlobalHydra.instance().clear()
    register_configs(schemas())
    with initialize_config_dir(config_dir=str(cli.CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", "run_id=s", *overrides], return_hydra_config=True)
    return cfg.hydra.launcher


@pytest.fixture
def no_slurm(tmp_path, monkeypatch):
    """A machine without Slurm's commands (sinfo cannot say what a partition has)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    for cached in (slurm.partition_has_gpus, slurm.largest_node):
        cached.cache_clear()
    yield
    for cached in (slurm.partition_has_gpus, slurm.largest_node):
        cached.cache_clear()


def test_gpus_only_when_the_engine_runs_on_gpus(no_slurm):
    assert _launcher("backend.device=cpu").gpus_per_node is None
    assert _launcher("n_gpus=0").gpus_per_node is None
    assert _launcher("backend.device=cuda", "n_gpus=2").gpus_per_node == 2
    assert _launcher("backend.device=cuda:0").gpus_per_node == 1
    assert _launcher().gpus_per_node == 1  # auto, and no sinfo to ask: n_gpus, as before
    assert _launcher("hydra.launcher.gpus_per_node=3", "backend.device=cpu").gpus_per_node == 3  # an override still wins


@pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm commands on this machine")
def test_auto_asks_the_partition():
    slurm.partition_has_gpus.cache_clear()
    probe = __import__("subprocess").run(["sinfo", "-h", "-o", "%P|%G"], capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.strip():
        pytest.skip("sinfo does not answer (no controller running)")
    rows = {name.rstrip("*"): ("gpu" in gres.lower(), name.endswith("*"))
            for name, _, gres in (line.partition("|") for line in probe.stdout.split())}
    for name, (gpus, default) in rows.items():
        assert slurm.gpus_per_node("auto", 2, name) == (2 if gpus else None), name
        if default:
            assert slurm.gpus_per_node("auto", 2, None) == (2 if gpus else None)
    assert slurm.gpus_per_node("auto", 2, "no-such-partition") == 2  # unknown: n_gpus


def test_n_gpus_0_is_accepted_on_a_cpu_and_refused_on_cuda(tmp_path):
    run = make_run(tmp_path, "z", n_gpus=0)
    assert not [p for p in validation.check_settings(run) if "n_gpus" in p]
    run.backend = BackendConfig(device="cuda")
    assert [p for p in validation.check_settings(run) if "n_gpus" in p] == [
        "n_gpus=0: backend.device=cuda runs on GPUs; n_gpus counts them (>= 1)"]
    assert [p for p in validation.check_settings(make_run(tmp_path, "z", n_gpus=-1)) if "n_gpus" in p] == [
        "n_gpus=-1: must be an integer in [0, inf]"]


def test_a_cpu_cell_records_n_gpus_0_and_its_rate_per_device(tmp_path):
    """Before: a CPU run with the default n_gpus=1 recorded n_gpus 1 (and the plots said "per GPU");
    with n_gpus=0 its per-GPU rate was NaN, so the throughput Pareto had no point. Now the cell records
    0 GPUs whatever n_gpus says, and its per-device rate counts the CPU as one device."""
    (cell,) = [c for c in runner.run_cells(make_run(tmp_path, "cpu0", categories=("coding",), max_new_tokens=4),
                                           progress=False) if not c.derived]
    assert cell.status == "ok" and cell.device == "cpu" and cell.n_gpus == 0
    assert cell.tokens_per_s_spec > 0 and cell.tokens_per_s_per_gpu_spec == cell.tokens_per_s_spec
    assert cell.tokens_per_s_per_gpu_baseline == cell.tokens_per_s_baseline
    assert cell.extra["measured_on"]["node"] == __import__("socket").gethostname()


def test_where_records_the_slurm_ids_of_the_job(monkeypatch):
    for name in slurm.SLURM_ENV.values():
        monkeypatch.delenv(name, raising=False)
    assert set(slurm.where()) == {"node"}
    monkeypatch.setenv("SLURM_JOB_ID", "1042")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1040")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert slurm.where()["slurm"] == {"job_id": "1042", "array_job_id": "1040", "array_task_id": "2"}
