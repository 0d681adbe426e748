"""A non-editable install: build the wheel, install it into a fresh venv, run from an empty folder.

The venv sees the packages of the environment running the tests (torch, transformers, vLLM are
not reinstalled), whether that is the system interpreter or a virtual environment, but the wheel
is installed into the venv itself, so ``speedbench`` is imported from there: the shipped configs,
gate tolerances and prompt sets must come from inside the package.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SKIP = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "runs", "wandb", ".venv")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc


def _site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests (in a venv: the venv's, and the
    base interpreter's when the venv includes them)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return [d for d in dict.fromkeys(dirs) if d in sys.path and Path(d).is_dir()]


def _see_this_environment(py: Path) -> None:
    """A ``.pth`` in the new venv listing this environment's site-packages, after the venv's own: its
    packages resolve, but not this environment's ``.pth`` files (an editable speedbench stays out).
    ``venv --system-site-packages`` would give the base interpreter's packages instead, which lack
    everything installed into a venv that runs the tests."""
    own = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(own) / "speedbench-test-env.pth").write_text("".join(f"{d}\n" for d in _site_dirs()))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=SKIP)
    dist = root / "dist"
    _check(subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
                          capture_output=True, text=True, timeout=600, env=_env()))
    (wheel,) = dist.glob("speedbench-*.whl")
    venv = root / "venv"
    _check(subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300))
    py = venv / "bin" / "python"
    _see_this_environment(py)
    _check(subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=600, env=_env()))
    return {"wheel": wheel, "python": py, "speedbench": venv / "bin" / "speedbench", "venv": venv}


def _run(installed, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed["speedbench"]), *args], capture_output=True, text=True, cwd=cwd, timeout=600, env=_env())


def test_the_wheel_carries_configs_prompts_and_models(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for name in ("speedbench/conf/config.yaml", "speedbench/conf/gate/ci.yaml", "speedbench/conf/dataset/smoke.yaml",
                 "speedbench/conf/experiment/ci_gate.yaml", "speedbench/datasets/smoke.jsonl",
                 "speedbench/datasets/qualitative.jsonl", "speedbench/datasets/filler/prose.txt",
                 "speedbench/fixtures/models/MANIFEST.json", "speedbench/fixtures/models/tiny-target/config.json",
                 "hydra_plugins/speedbench_launchers/__init__.py"):  # hydra/launcher=local|slurm
        assert name in names, name
    assert not any(n.startswith(("tests/", "conf/", "datasets/")) for n in names)


def test_run_from_an_empty_folder(installed, tmp_path):
    where = subprocess.run([str(installed["python"]), "-c", "import speedbench, speedbench.paths as p; print(speedbench.__file__); print(p.conf_dir()); print(p.datasets_dir())"],
                           capture_output=True, text=True, cwd=tmp_path, env=_env())
    module, conf, data = where.stdout.split()
    venv = str(installed["venv"].resolve())
    assert module.startswith(venv) and conf.startswith(venv) and data.startswith(venv), where.stdout
    proc = _check(_run(installed, tmp_path, "run", "dataset=smoke", "dataset.categories=[coding,math]", "max_new_tokens=8",
                       "run_id=wheel", "--json", "summary.json"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert Path(summary["results"]) == (tmp_path / "results/runs/wheel").resolve()
    assert [c["status"] for c in summary["cells"] if not c.get("derived")] == ["ok", "ok"]
    assert sorted(c["category"] for c in summary["cells"] if not c.get("derived")) == ["coding", "math"]
    assert (tmp_path / "results/runs/latest").resolve() == (tmp_path / "results/runs/wheel").resolve()
    assert "results: results/runs/wheel" in proc.stdout
    # the shipped gate tolerances and the report work from the package too
    _check(_run(installed, tmp_path, "gate", "--baseline", "results/runs/wheel", "--current", "results/runs/latest", "--config", "ci",
                    "--allow-nothing-gated"))  # one prompt per cell: too few to gate, which is not the point here
    _check(_run(installed, tmp_path, "report", "results/runs/latest", "--no-plots"))
    assert (tmp_path / "results/runs/wheel/report/report.md").is_file()
    # the shipped prompt file resolves inside the package from any folder, with both spellings
    for name in ("smoke.jsonl", "datasets/smoke.jsonl"):
        _check(_run(installed, tmp_path, "data", "validate", name))


def test_a_user_config_folder_with_its_own_experiment(installed, tmp_path):
    conf = tmp_path / "myconf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "dataset").mkdir()
    (conf / "experiment" / "mine.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - override /drafter: ngram\n  - override /dataset: my_prompts\n"
        "drafter:\n  num_speculative_tokens: 3\nmax_new_tokens: 8\nrun_id: mine\n"
    )
    (conf / "dataset" / "my_prompts.yaml").write_text("name: my_prompts\nsource: local\npath: smoke.jsonl\ncategories: [math]\n")
    _check(_run(installed, tmp_path, "run", "+experiment=mine", "--config-dir", str(conf), "--json", "out.json"))
    cells = json.loads((tmp_path / "out.json").read_text())["cells"]
    assert [(c["drafter"], c["num_speculative_tokens"], c["category"], c["dataset"]) for c in cells] == [("ngram", 3, "math", "my_prompts")]
