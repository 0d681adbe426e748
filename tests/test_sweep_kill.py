"""A sweep killed with SIGKILL mid-way loses no finished cell; rerunning it with the same
run_id finishes the rest without redoing or duplicating any cell."""
import os
import signal
import subprocess
import sys
import time

from speedbench import cli
from speedbench.results import ResultsStore
from tests.sweep_helpers import speedbench_cmd, subprocess_env

# 2 draft lengths (jobs) x (3 categories + the derived overall row) = 8 cells
SWEEP = ["run", "run_id=killed", "dataset=mini", "drafter.num_speculative_tokens=2,3", "max_new_tokens=8",
         "warmup_batches=0", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled", "-m"]
N_CELLS = 8


def finished_cells(folder):
    return {p.name: p.read_bytes() for p in folder.glob("*.json")} if folder.is_dir() else {}


def test_sigkill_mid_sweep_loses_nothing_and_resume_completes(tmp_path, monkeypatch):
    cells_dir = tmp_path / "killed" / "cells"
    args = [f"results_dir={tmp_path}", *SWEEP[1:]]
    proc = subprocess.Popen(speedbench_cmd("run", *args), cwd=tmp_path, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while len(finished_cells(cells_dir)) < 2:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "no cell written in time"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    survived = finished_cells(cells_dir)
    assert 2 <= len(survived) < N_CELLS, "kill came too late to test a resume"
    assert all(ResultsStore(tmp_path / "killed").finished(name[:-5]) for name in survived)  # whole, parseable

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert cli.main(["run", *args]) == 0  # the rerun, in this process
    after = finished_cells(cells_dir)
    assert len(after) == N_CELLS
    assert {k: after[k] for k in survived} == survived  # finished cells were skipped, not redone
    table = ResultsStore(tmp_path / "killed").cells()
    assert len(table) == N_CELLS and table.cell_id.is_unique and (table.status == "ok").all()
    assert sorted(table.groupby("num_speculative_tokens").size()) == [4, 4]
    assert table.derived.sum() == 2
    assert len((tmp_path / "killed" / "cells.jsonl").read_text().splitlines()) == N_CELLS
