"""A sweep through hydra/launcher=local (submitit): each job in its own process, all jobs
writing into one results folder under one run_id resolved once at launch, and the
failure fraction judged over the whole sweep in the launching process."""
import json
import subprocess
import sys
from pathlib import Path

from speedbench.results import ResultsStore
from tests.support.sweep_helpers import REPO, broken_model_dir, speedbench_cmd, subprocess_env


def _env_as_installed(cwd: Path) -> dict[str, str]:
    """The environment a user has: this checkout NOT put on the path, where the installed package is
    this checkout (an editable install, as ``scripts/install.sh`` makes); else the checkout first."""
    env = subprocess_env()
    bare = {**env, "PYTHONPATH": ""}
    probe = subprocess.run([sys.executable, "-c", "import speedbench; print(speedbench.__file__)"], env=bare, cwd=cwd,
                           capture_output=True, text=True)
    installed_here = probe.returncode == 0 and Path(probe.stdout.strip()).resolve().is_relative_to(REPO)
    return bare if installed_here else env


def test_submitit_local_jobs_share_one_results_folder(tmp_path):
    # no run_id given: the default ${now:...} must resolve to the same folder in every job
    broken = broken_model_dir(tmp_path / "models")  # passes validation (configs only), fails when loaded
    results = tmp_path / "results"
    # run as a user would, from another folder without the checkout on the path: an editable install
    # does not expose the hydra_plugins namespace to Hydra's plugin discovery there
    proc = subprocess.run(speedbench_cmd(
        "run", f"results_dir={results}", "hydra/launcher=local", "drafter=tiny_draft",
        "dataset=mini", "dataset.categories=[coding]", "dataset.n_requests=2", "max_new_tokens=4", "warmup_batches=0", "sweep.allowed_failure_frac=0.5",
        f"drafter.model=builtin:tiny-draft-small,{broken}", "-m"), cwd=tmp_path, env=_env_as_installed(tmp_path),
        capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    folders = [p for p in results.iterdir() if p.is_dir() and not p.is_symlink()]  # not the `latest` pointer
    assert len(folders) == 1, folders
    root = folders[0]
    cells = ResultsStore(root).cells()
    assert len(cells) == 2 and sorted(cells.status) == ["failed", "ok"]
    assert set(cells.run_id) == {root.name}
    # two submitit jobs, each its own process (its own job folder and log); submitit's pickles (the
    # run's config, secrets included) stayed in a private temporary folder, removed afterwards
    jobs = [p for p in (root / ".hydra" / ".submitit").iterdir() if p.is_dir() and not p.name.startswith("%")]
    assert len(jobs) == 2
    assert all(any(j.glob("*_log.out")) for j in jobs)
    assert not list(root.rglob("*.pkl"))
    # the broken job is 100% failed on its own; over the sweep 1 of 2 = 50% is allowed
    assert "1 of 2 cells failed (50%), within" in proc.stdout
    assert json.loads((root / "provenance.json").read_text())["config"]["run_id"] == root.name
