"""A Slurm job sized from what the partition's nodes have (``sinfo``), a job no node can run refused before it is
submitted, and a job pending for a reason waiting cannot resolve reported; against the real cluster when one
answers (``scripts/slurm-local.sh``), and the plain defaults where Slurm cannot say."""
import logging
import subprocess
import time

import pytest

from speedbench import slurm
from speedbench.launchers.slurm_states import StateWatcher

from .test_slurm_settings import _launcher, no_slurm  # noqa: F401 - the fixture


@pytest.fixture
def node():
    slurm.largest_node.cache_clear()
    found = slurm.largest_node(None)
    if found is None:
        pytest.skip("no Slurm cluster answers sinfo (start one with `sudo bash scripts/slurm-local.sh start`)")
    yield found
    slurm.largest_node.cache_clear()


def test_without_slurm_a_job_asks_the_defaults(no_slurm):  # noqa: F811
    launcher = _launcher()
    assert (launcher.cpus_per_task, launcher.mem_gb) == (slurm.CPUS_PER_TASK, slurm.MEM_GB)
    assert slurm.fit_problems(launcher) == []


def test_a_job_asks_at_most_what_the_largest_node_has(node):
    launcher = _launcher()
    assert launcher.cpus_per_task == min(8, node.cpus) and launcher.mem_gb == min(64, node.mem_mb // 1024)
    assert slurm.fit_problems(launcher) == []  # the defaults fit a small cluster: no override needed


def test_a_job_no_node_can_run_is_refused_naming_the_keys(node):
    launcher = _launcher(f"hydra.launcher.cpus_per_task={node.cpus + 6}", f"hydra.launcher.mem_gb={node.mem_mb // 1024 + 64}")
    problems = slurm.fit_problems(launcher)
    assert len(problems) == 2
    assert problems[0].startswith(f"hydra.launcher.cpus_per_task={node.cpus + 6}: no node of the default partition has "
                                  f"more than {node.cpus} CPUs") and f"at most {node.cpus}" in problems[0]
    assert problems[1].startswith("hydra.launcher.mem_gb=") and "set hydra.launcher.mem_gb to at most" in problems[1]


def test_a_job_pending_for_a_reason_that_cannot_resolve_is_reported_once(node, caplog):
    sub = subprocess.run(["sbatch", "--parsable", "-c", str(node.cpus + 6), "-t", "1", "--wrap", "true"],
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        watcher = StateWatcher(delay_s=0)
        watcher.register_job(job)
        found, deadline = [], time.monotonic() + 60
        with caplog.at_level(logging.WARNING, logger="speedbench.launchers.slurm_states"):
            while not found and time.monotonic() < deadline:  # the scheduler names the reason on its next pass
                found = watcher.report_stuck()
                time.sleep(1)
            assert found == [(job, "PartitionConfig")]
            assert watcher.report_stuck() == []  # once
        (said,) = [r.getMessage() for r in caplog.records if job in r.getMessage()]
        assert "PartitionConfig" in said and "hydra.launcher.cpus_per_task" in said
    finally:
        subprocess.run(["scancel", job], timeout=60)
