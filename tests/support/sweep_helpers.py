"""Helpers shared by the sweep, merge, W&B and gate tests (not a test module)."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from speedbench.pipeline import runner
from speedbench.config import BackendConfig, DatasetConfig, ModelConfig, RunConfig, SamplingConfig
from speedbench.drafters.registry import make_drafter

REPO = Path(__file__).resolve().parents[2]


def make_run(results_dir: Path, run_id: str, categories=("coding", "math", "writing"), max_new_tokens: int = 16, **kw) -> RunConfig:
    """The embedded default, shrunk: typed objects, no Hydra."""
    run = RunConfig(
        target=ModelConfig(name="tiny", path="random:tiny-target"),
        drafter=make_drafter("ngram", 4),
        dataset=DatasetConfig(name="mini", path="qualitative.jsonl", categories=list(categories), n_requests=2 * len(categories)),
        backend=BackendConfig(),
        sampling=SamplingConfig(),
        results_dir=str(results_dir),
        run_id=run_id,
        max_new_tokens=max_new_tokens,
    )
    for key, value in kw.items():
        setattr(run, key, value)
    return run


def ci_benchmark_run(results_dir: Path, run_id: str, **kw) -> RunConfig:
    """The project's CI benchmark (conf/experiment/ci_gate.yaml, composed as ``speedbench run
    +experiment=ci_gate`` composes it), written under ``results_dir``: the measurement that
    conf/gate/ci.yaml's speedup tolerance was calibrated on. A smaller run gated with that
    tolerance would raise false alarms the calibration never saw."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from speedbench.backends.registry import schemas
    from speedbench.cli import CONF_DIR
    from speedbench.config.hydra import register_configs, to_run_config

    GlobalHydra.instance().clear()
    register_configs(schemas())
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        run = to_run_config(compose(config_name="config", overrides=["+experiment=ci_gate"]), schemas())
    GlobalHydra.instance().clear()
    run.results_dir, run.run_id = str(results_dir), run_id
    for key, value in kw.items():
        setattr(run, key, value)
    return run


def subprocess_env(**extra: str) -> dict[str, str]:
    """This checkout first on the path (the installed package may be another worktree), one thread."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1", **extra}


def speedbench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "speedbench.cli", *args]


def run_speedbench(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(speedbench_cmd(*args), capture_output=True, text=True, cwd=cwd, timeout=timeout, env=subprocess_env())


@functools.lru_cache(maxsize=None)
def shared_results() -> Path:
    """One small real run (3 categories = 3 cells), measured once per test session; copy before changing."""
    root = Path(tempfile.mkdtemp(prefix="speedbench-tests-"))
    atexit.register(shutil.rmtree, root, True)
    runner.run_cells(make_run(root, "shared"), progress=False)
    return root / "shared"


def copy_results(dst: Path) -> Path:
    shutil.copytree(shared_results(), dst)
    return dst


def broken_model_dir(root: Path, name: str = "broken-draft") -> Path:
    """A drafter folder whose config and tokenizer are fine but whose weights are garbage: it passes the
    pre-load validation (configs only) and fails when the engine loads it - a genuine runtime failure."""
    from speedbench.models import resolve_path

    src = Path(resolve_path("builtin:tiny-draft-small"))
    dst = Path(root) / name
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin")):
            shutil.copy(f, dst / f.name)
    (dst / "model.safetensors").write_bytes(b"not a safetensors file")
    return dst
