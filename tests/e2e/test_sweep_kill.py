"""A sweep killed with SIGKILL mid-way loses no finished cell; rerunning it with the same
run_id finishes the rest without redoing or duplicating any cell. SIGTERM to a local sweep
stops every job it launched."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from speedbench import cli
from speedbench.results import ResultsStore
from tests.support.sweep_helpers import speedbench_cmd, subprocess_env

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


API_KEY = "sk-SweepSecretKey12345"
URL_PASSWORD = "SweepUrlPw-42x"


def _group(pgid):
    """Live processes of the process group ``pgid`` (zombies are dead)."""
    alive = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive[int(stat.parent.name)] = fields[0]
    return alive


def test_sigterm_to_a_local_sweep_stops_every_job_and_leaves_no_secret(tmp_path):
    """SIGTERM to the launcher only (as `kill PID` or `timeout` sends it): every job process it
    started stops; the results folder holds no pickle and no secret; the console lines that list
    the jobs' overrides are redacted."""
    root = tmp_path / "res" / "stop"
    proc = subprocess.Popen(
        speedbench_cmd("run", f"results_dir={tmp_path / 'res'}", "run_id=stop", "hydra/launcher=local", "dataset=mini",
                       "dataset.categories=[coding]", "max_new_tokens=32", "warmup_batches=0", "protocol.budget_s=60",
                       "drafter=ngram", "target.path=random:tiny-target", "drafter.num_speculative_tokens=2,3",
                       f"+logger.options.api_key={API_KEY}", f"+logger.options.endpoint=http://u:{URL_PASSWORD}@h/v1", "-m"),
        cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(list((root / ".locks").glob("*.lock"))) < 2:  # both jobs are measuring
            assert proc.poll() is None and time.monotonic() < deadline, "the jobs did not start in time"
            time.sleep(0.1)
        jobs = set(_group(proc.pid)) - {proc.pid}
        assert len(jobs) >= 4  # two controllers, two job processes
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        assert "sweep stopped by SIGTERM: 2 job(s) cancelled" in err
        end = time.monotonic() + 10
        while _group(proc.pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert _group(proc.pid) == {}, "job processes kept running after the launcher exited"
    finally:
        if _group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert "#0 : " in err and "#1 : " in err
    assert API_KEY not in out + err and URL_PASSWORD not in out + err
    files = [p for p in root.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".pkl"], "submitit pickles under the results folder"
    assert any(p.name.endswith("_log.err") for p in files)  # the jobs' logs are kept, redacted
    for path in files:
        data = path.read_bytes()
        assert API_KEY.encode() not in data and URL_PASSWORD.encode() not in data, path
    for cell in (root / "cells").glob("*.json"):
        json.loads(cell.read_text())  # whatever was written is whole
