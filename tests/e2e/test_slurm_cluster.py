"""The README's Slurm sweep on a real one-node Slurm cluster (``scripts/slurm-local.sh``).

The cluster is the one CI starts (``.ci/run``), or started here when this runs as root with apt
(and stopped again at the end); elsewhere the tests skip, saying why. ``SPEEDBENCH_REQUIRE_SLURM=1``
(set by CI) turns that skip into a failure, so CI cannot pass without running them.

* the sweep: an array job (two values of D), one results folder, every cell ok, the verdict and
  the table; no GPU asked of a CPU cluster and no repeated sacct warning (accounting is off);
  where each cell ran (node, array job and task) in the cells;
* ``scancel`` of one task: the sweep ends with a one-line error (exit 1), the same command resumes
  it to completion without measuring finished cells again;
* a task killed at its one-minute time limit: submitit's USR2 handler (``signal_delay_s``,
  ``max_num_timeout``) requeues it, and the requeued task resumes and finishes the cells.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from speedbench.results import ResultsStore
from tests.support.sweep_helpers import REPO, speedbench_cmd, subprocess_env

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
SMALL = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "dataset=smoke",
         "max_new_tokens=8", "protocol.min_repeats=2", "protocol.max_repeats=2"]


def _skip(reason: str):
    if os.environ.get("SPEEDBENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"SPEEDBENCH_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster():
    if subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0:
        yield  # already up (CI starts it before the tests)
        return
    if os.geteuid() != 0:
        _skip("no Slurm cluster running and not root: start one with `sudo bash scripts/slurm-local.sh start`")
    if not (shutil.which("slurmctld") or shutil.which("apt-get")):
        _skip("no Slurm cluster running and no apt-get to install one")
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr[-3000:]
    yield
    subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=120)


def _sweep(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(speedbench_cmd("run", *SMALL, *args, "-m"), cwd=cwd, env=subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen, timeout: int = 400) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the sweep did not end within {timeout}s:\n{out[-2000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


def _tasks(name: str) -> dict[str, str]:
    """``{job_id: state}`` of the Slurm jobs named ``name`` (array tasks one by one, ended ones too)."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-n", name, "-o", "%i|%T"], capture_output=True, text=True)
    return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line)


def _wait_for(what, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what.__doc__ or what}")


LIMITED = ("run_id=limit", "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10", "hydra.launcher.max_num_timeout=6",
           "faults.delay_ms=700", "drafter.num_speculative_tokens=2")


@pytest.fixture(scope="module")
def limited_sweep(cluster, tmp_path_factory):
    """The time-limit sweep, started before the other test so both run at once (one CPU each)."""
    results = tmp_path_factory.mktemp("limit") / "runs"
    proc = _sweep(results.parent, f"results_dir={results}", *LIMITED)
    yield proc, results / "limit"
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_sweep_on_slurm_scancel_one_task_then_resume(cluster, limited_sweep, tmp_path):
    results = tmp_path / "runs"
    args = (f"results_dir={results}", "run_id=sweep", "hydra.launcher.array_parallelism=1", "drafter.num_speculative_tokens=2,4")
    proc = _sweep(tmp_path, *args)

    def second_task_queued():
        """the array's second task in squeue"""
        return next((job for job, state in _tasks("speedbench-sweep").items() if job.endswith("_1") and state == "PENDING"), None)

    second = _wait_for(second_task_queued)  # pending behind the first (array_parallelism=1)
    subprocess.run(["scancel", second], check=True)
    code, out, err = _finish(proc)
    assert code == 1, (out[-2000:], err[-3000:])
    assert f"a job of the sweep ended without a result (Job {second}" in err and "rerun the same command to resume" in err
    assert "has not produced any output" in err  # squeue drops a task cancelled while pending: state ENDED
    first = ResultsStore(results / "sweep").cells()
    assert len(first) == 12 and set(first.status) == {"ok"} and set(first.num_speculative_tokens) == {2}

    code, out, err = _finish(_sweep(tmp_path, *args))  # the same command: resume
    assert code == 0, (out[-2000:], err[-3000:])
    cells = ResultsStore(results / "sweep").cells()
    assert len(cells) == 24 and set(cells.status) == {"ok"}
    assert sorted(cells.num_speculative_tokens.value_counts().items()) == [(2, 12), (4, 12)]
    assert "sweep " in out and "0 of 24 cells failed (0%), within sweep.allowed_failure_frac=0" in out
    # the table shows what this run added (the D=4 task's 12 cells), and says the rest was kept
    assert len([line for line in out.splitlines() if " ok" in line and "tiny_draft_small" in line]) == 12
    assert "resumed: 12 cell(s) written by this run (below), 12 kept from before" in out
    kept = first.set_index("cell_id").wall_s
    assert (cells.set_index("cell_id").wall_s.loc[kept.index] == kept).all()  # finished cells were not measured again
    # where each cell ran: this node, one array job, D=2 in task 0 and D=4 in task 1 (the resubmitted array)
    where = [(c["extra"]["measured_on"], c["num_speculative_tokens"]) for c in cells.to_dict("records")]
    assert {w["node"] for w, _ in where} == {socket.gethostname()}
    assert {(w["slurm"]["array_task_id"], d) for w, d in where} == {("0", 2), ("1", 4)}
    # a CPU cluster: no GPU asked for, no override needed; accounting off: one line, not one per poll
    scripts = list((results / "sweep" / ".hydra" / ".submitit").rglob("*_submission.sh"))
    assert scripts and not any("gpus" in s.read_text() for s in scripts)
    assert "Bypassing sacct error" not in out + err
    assert (out + err).count("job states come from squeue") == 1


def test_a_task_killed_at_its_time_limit_is_requeued_and_finishes(limited_sweep):
    """One-minute limit, USR2 10 s before it: Slurm signals the job 20-50 s after it starts (its
    30-s timer), submitit requeues it, and every run measures the cells the last one left. About
    a minute of work (11 cells of ~4 s, the drafter slowed with faults.delay_ms), so the first
    run is always cut short."""
    proc, root = limited_sweep
    code, out, err = _finish(proc, timeout=500)
    assert code == 0, (out[-2000:], err[-3000:])
    cells = ResultsStore(root).cells()
    assert len(cells) == 12 and set(cells.status) == {"ok"}  # 11 categories and the derived overall cell
    logs = "".join(p.read_text() for p in (root / ".hydra" / ".submitit").rglob("*_log.err"))
    assert "Caught signal SIGUSR2" in logs and "this job is timed-out" in logs
    assert "Requeued job" in logs
    (job,) = {c["extra"]["measured_on"]["slurm"]["job_id"] for c in cells.to_dict("records")}  # one job, requeued
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    restarts = int(shown.split("Restarts=")[1].split()[0]) if "Restarts=" in shown else None
    assert restarts is None or restarts >= 1, shown  # None: the job aged out of the controller
    prov = json.loads((root / "provenance.json").read_text())
    assert prov["measured_on"]["slurm"]["job_id"] == job


def test_sigterm_to_a_slurm_sweep_cancels_its_jobs_and_removes_the_pickles(cluster, tmp_path):
    """SIGTERM to the launching process (a CI cancel, ``timeout``, ``kill``): every job of the array is
    ``scancel``-ed through submitit, the launcher exits 143 in one line, and submitit's pickles (the
    run's config, secrets included) are gone. The jobs stay pending (they may begin in an hour:
    ``sbatch --begin``; a size no node has is refused before submitting): nothing is measured, the
    stop is what is tested."""
    results = tmp_path / "runs"
    args = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2",
            "+hydra.launcher.additional_parameters.begin=now+1hour", "dataset=smoke",
            "max_new_tokens=8", f"results_dir={results}", "run_id=stopped", "drafter.num_speculative_tokens=2,4", "-m"]
    proc = subprocess.Popen(speedbench_cmd("run", *args), cwd=tmp_path, env=subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def both_tasks_queued():
        """the array's two tasks in squeue"""
        tasks = _tasks("speedbench-stopped")
        return tasks if len(tasks) >= 2 or any("[" in job for job in tasks) else None

    _wait_for(both_tasks_queued)
    proc.send_signal(15)
    code, out, err = _finish(proc, timeout=120)
    assert code == 143, (out[-2000:], err[-3000:])
    assert "sweep stopped by SIGTERM: 2 job(s) cancelled" in err
    _wait_for(lambda: not [s for s in _tasks("speedbench-stopped").values() if s in ("PENDING", "RUNNING")] or None,
              timeout=30)
    assert not list(results.rglob("*.pkl"))


def test_a_sweep_without_size_overrides_runs_and_one_no_node_can_run_is_refused(cluster, tmp_path):
    """The launcher's 8 CPUs and 64 GB on a small node pended forever (PartitionConfig) while the sweep waited in
    silence: now a job asks what the partition's largest node has, and a size set by hand that no node has is
    refused before anything is submitted, naming the keys."""
    cpus = int(subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True).stdout.split()[0])
    base = ["hydra/launcher=slurm", "dataset=smoke", "dataset.categories=[coding]", "max_new_tokens=8",
            "protocol.min_repeats=2", "protocol.max_repeats=2", f"results_dir={tmp_path / 'runs'}"]
    refused = subprocess.run(speedbench_cmd("run", *base, "run_id=big", f"hydra.launcher.cpus_per_task={cpus + 6}",
                                            "drafter.num_speculative_tokens=2,4", "-m"),
                             cwd=tmp_path, env=subprocess_env(), text=True, capture_output=True, timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"hydra.launcher.cpus_per_task={cpus + 6}: no node of the default partition has more than {cpus} CPUs" \
        in refused.stderr and "Traceback" not in refused.stderr
    assert _tasks("speedbench-big") == {}  # nothing submitted
    proc = subprocess.Popen(speedbench_cmd("run", *base, "run_id=fits", "drafter.num_speculative_tokens=2", "-m"),
                            cwd=tmp_path, env=subprocess_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    code, out, err = _finish(proc)
    assert code == 0, (out[-2000:], err[-3000:])
    (script,) = (tmp_path / "runs" / "fits" / ".hydra" / ".submitit").rglob("*_submission.sh")
    assert f"#SBATCH --cpus-per-task={min(8, cpus)}" in script.read_text()
    assert set(ResultsStore(tmp_path / "runs" / "fits").cells().status) == {"ok"}
